"""Committed copies of runs (pack / unpack) and the fingerprints of figures and PNGs."""

from __future__ import annotations

import json
import lzma
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedaccel.errors import ConfigError, UserError
from fedaccel.launch import run
from fedaccel.report.diagnostics import read_diagnostics, selection_figure
from fedaccel.report.reading import load_run, load_runs
from fedaccel.reproductions.snapshot import fingerprint, pack, pixels, read_packed, unpack, write_folder
from fedaccel.runs.config import load_config

TINY_BHERD = ["data.dataset=digits", "model=softmax", "data.clients=3", "data.split=case2", "algorithm=bherd",
              "train.rounds=3", "eval.every=2", "train.batch_size=100", "run.progress=false"]


def _write_run(path: Path, metrics: list[dict], diagnostics: list[dict] | None) -> Path:
    path.mkdir(parents=True)
    (path / "config.yaml").write_text("algorithm: {name: bherd}\n")
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metrics))
    if diagnostics is not None:
        (path / "diagnostics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in diagnostics))
    return path


def test_unpacked_runs_read_as_the_originals(tmp_path: Path) -> None:
    original = run(load_config(None, TINY_BHERD), tmp_path / "runs" / "cell-a")
    data = tmp_path / "exp.jsonl.xz"
    assert pack([original], data) is True
    assert pack([original], data) is False  # same runs: the file is left as it is

    (copy,) = unpack(data, tmp_path / "unpacked")
    assert copy.name == "cell-a"
    a, b = load_run(original), load_run(copy)
    assert b.config == a.config and b.metrics == a.metrics
    assert read_diagnostics(copy) == read_diagnostics(original)
    assert any("diag" in row for row in b.metrics)  # rebuilt from the diagnostics, stored once
    stored = json.loads(lzma.decompress(data.read_bytes()))
    assert all("diag" not in row for row in stored["metrics"])


def test_rows_that_are_not_the_runners_layout_are_kept_verbatim(tmp_path: Path) -> None:
    metrics = [{"round": 1, "test_acc": 0.5, "diag": {"x": 1}}, {"round": 2, "test_acc": 0.6}]
    runs = [_write_run(tmp_path / "odd", metrics, [{"round": 1, "x": 2}, {"round": 2, "x": 3}]),
            _write_run(tmp_path / "no-diag", [{"round": 1, "test_acc": 0.5}], None)]
    pack(runs, tmp_path / "d.jsonl.xz")
    odd, no_diag = unpack(tmp_path / "d.jsonl.xz", tmp_path / "out")
    assert load_run(odd).metrics == metrics
    assert not (no_diag / "diagnostics.jsonl").exists()


def test_a_run_its_rows_alone_say_diverged_is_packed_diverged(tmp_path: Path) -> None:
    """A run folder without a summary whose loss became infinite (as unpacked from older data) keeps its
    divergence through pack and unpack: the record says so, not an empty summary that would drop it."""
    rows = [{"round": 1, "test_acc": 0.5, "test_loss": 1e30}, {"round": 2, "test_acc": 0.5, "test_loss": float("inf")}]
    folder = _write_run(tmp_path / "gone", rows, None)
    assert load_run(folder).diverged_round == 2
    pack([folder], tmp_path / "d.jsonl.xz")
    (copy,) = unpack(tmp_path / "d.jsonl.xz", tmp_path / "out")
    assert json.loads((copy / "summary.json").read_text()) == {"diverged": True, "diverged_round": 2}
    assert load_run(copy).diverged_round == 2


def test_unpack_of_a_file_that_is_not_xz_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "bad.jsonl.xz").write_text("{}")
    with pytest.raises(UserError, match="not an xz file"):
        unpack(tmp_path / "bad.jsonl.xz", tmp_path / "out")


@settings(max_examples=30, deadline=None)
@given(cell=st.one_of(st.sampled_from(["..", ".", "../x", "a/../../x", "/etc/x", "a\\b", "a\0b"]),
                      st.text(min_size=1, max_size=12).map(lambda t: "../" + t)))
def test_a_packed_cell_name_that_leaves_the_folder_is_refused(cell: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """A packed grid from someone else names its cells: a name that is not one folder name is refused in
    one line, and nothing is written outside the folder it unpacks into."""
    tmp = tmp_path_factory.mktemp("pack")
    record = {"cell": cell, "config": {}, "metrics": [], "diagnostics": None}
    (tmp / "p.jsonl.xz").write_bytes(lzma.compress((json.dumps(record) + "\n").encode()))
    with pytest.raises((UserError, ConfigError), match="must be one folder name"):
        unpack(tmp / "p.jsonl.xz", tmp / "deep" / "out")
    assert sorted(p.name for p in tmp.rglob("*")) == ["p.jsonl.xz"]


GOOD = {"cell": "a", "config": {"algorithm": {"name": "fedavg"}}, "metrics": [{"round": 1, "test_acc": 0.5}],
        "diagnostics": [{"round": 1, "clients": {"0": {"tau": 3}}}]}


def _packed(tmp: Path, lines: list[str] | bytes) -> Path:
    """``lines`` packed as :func:`pack` does, or ``bytes`` of an xz file as they are."""
    (tmp / "p.jsonl.xz").write_bytes(lines if isinstance(lines, bytes) else lzma.compress("\n".join(lines).encode()))
    return tmp / "p.jsonl.xz"


@st.composite
def hostile_pack(draw: st.DrawFn) -> tuple[str, list[str]]:
    """A packed grid with one fault of the issue's kinds: nesting too deep, a field of the wrong type (a
    non-list ``metrics``), a row readers refuse, too many cells; returned with words the refusal says."""
    kind = draw(st.sampled_from(["deep", "type", "row", "rounds", "surrogate", "cells", "plugins"]))
    if kind == "plugins":  # the plugins line a cell carries: a mapping of kinds to records of five strings
        record = {"name": "m", "distribution": "d", "version": "1", "entry_point": "m:m", "sha256": "ab"}
        wrong = draw(st.sampled_from([
            [record], {"algorithm": "x"}, {"algorithm": {**record, "sha256": 3}}, {"algorithm": {"name": "m"}},
            {"algorithm": {**record, "extra": "y"}}, {"algorithm": None}, "algorithm",
            {"algorithm": {**record, "name": None}}]))
        return "plugins of the wrong form", [json.dumps({**GOOD, "plugins": wrong})]
    if kind == "deep":
        depth = draw(st.integers(40, 100_000))
        where = draw(st.sampled_from(["config", "metrics", "top"]))
        deep = "[" * depth + "]" * depth
        line = deep if where == "top" else json.dumps({**GOOD, where: "@"}).replace('"@"', deep)
        return "nested deeper", [line]
    if kind == "type":
        key = draw(st.sampled_from(["metrics", "config", "diagnostics", "cell", "summary"]))
        allowed = {"metrics": list, "config": dict, "diagnostics": (list, type(None)), "cell": str, "summary": dict}[key]
        value = draw(st.sampled_from([{"a": 1}, "", 3, None, [1], True]).filter(
            lambda v: not isinstance(v, allowed) or v == ""))
        return "not a packed grid", [json.dumps({**GOOD, key: value})]
    if kind == "row":
        words, rows = draw(st.sampled_from([("no integer 'round'", [{"round": "1"}]), ("expected a JSON object", [3]),
                                            ("after round 2", [{"round": 2}, {"round": 1}]),
                                            ("no integer 'round'", [{"test_acc": 1}])]))
        if draw(st.booleans()):
            return words, [json.dumps({**GOOD, draw(st.sampled_from(["metrics", "diagnostics"])): rows})]
        return "not what fedaccel writes there", [json.dumps({**GOOD, "diagnostics": [
            {"round": 1, "clients": {"0": {"tau": draw(st.sampled_from(["x", -1, 2**63 - 1]))}}}]})]
    if kind == "rounds":  # a row past train.rounds, or an evaluation round missing: what a folder's reader refuses
        rounds = draw(st.integers(2, 50))
        config = {**GOOD["config"], "train": {"rounds": rounds}, "eval": {"every": 1}}
        if draw(st.booleans()):
            return f"is outside 0..{rounds}", [json.dumps({**GOOD, "config": config, "diagnostics": None,
                                                          "metrics": [{"round": rounds + draw(st.integers(1, 10))}]})]
        lost = draw(st.integers(1, rounds - 1))  # a row after it (rows that end early: a run not finished)
        metrics = [{"round": r, "test_acc": 0.5} for r in range(1, rounds + 1) if r != lost]
        return f"round {lost} is missing", [json.dumps({**GOOD, "config": config, "metrics": metrics, "diagnostics": None})]
    if kind == "surrogate":  # a JSON escape of half a UTF-16 pair: no folder's UTF-8 file could hold it
        half = draw(st.integers(0xD800, 0xDFFF))
        where = draw(st.sampled_from(["config", "metrics", "cell"]))
        value = {"config": {**GOOD["config"], "name": "@"}, "metrics": [{"round": 1, "note": "@"}], "cell": "@"}[where]
        return "lone surrogate", [json.dumps({**GOOD, where: value}).replace('"@"', f'"x\\u{half:04x}"')]
    return "more than 5", [json.dumps({**GOOD, "cell": f"c{k}"}) for k in range(draw(st.integers(6, 40)))]


@settings(max_examples=40, deadline=None)
@given(case=hostile_pack(), reader=st.sampled_from([unpack, read_packed]))
def test_a_hostile_packed_grid_is_one_line_and_unpacks_nothing(
        case: tuple[str, list[str]], reader: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Issue 47, item 4: deep JSON was a RecursionError, a non-list ``metrics`` an AttributeError, 100,000 cells
    made 100,000 folders; each is now one line before a folder is made (here the cell limit is 5), whether the
    runs are unpacked into folders or read in memory (the reports)."""
    words, lines = case
    tmp = tmp_path_factory.mktemp("pack")
    with pytest.MonkeyPatch.context() as patch, pytest.raises(UserError) as refused:
        patch.setenv("FEDACCEL_MAX_CELLS", "5")
        reader(_packed(tmp, lines), tmp / "out")
    message = str(refused.value)
    assert "\n" not in message and len(message) < 600 and words in message, message
    assert not (tmp / "out").exists()


def test_runs_read_in_memory_are_the_unpacked_folders_read_back(tmp_path: Path) -> None:
    """:func:`read_packed` (the reports' reader) gives what :func:`unpack` then :func:`load_runs` give: configs,
    rows, summaries and diagnostics, for the runner's layout, verbatim rows, a run without diagnostics and one
    diverged; and :func:`write_folder` writes the folder :func:`unpack` writes, file for file."""
    bherd = run(load_config(None, TINY_BHERD), tmp_path / "runs" / "cell-a")
    odd = _write_run(tmp_path / "runs" / "odd", [{"round": 1, "test_acc": 0.5, "diag": {"x": 1}}, {"round": 2}],
                     [{"round": 1, "x": 2}, {"round": 2, "x": 3}])
    plain = _write_run(tmp_path / "runs" / "no-diag", [{"round": 1, "test_acc": 0.5}], None)
    empty = _write_run(tmp_path / "runs" / "empty-diag", [{"round": 1, "test_acc": 0.5}], [])  # as the runner writes
    gone = _write_run(tmp_path / "runs" / "gone", [{"round": 1, "test_loss": float("inf")}], None)
    originals = [bherd, odd, plain, empty, gone]
    data = tmp_path / "d.jsonl.xz"
    pack(originals, data)
    folders = load_runs(unpack(data, tmp_path / "unpacked"))
    in_memory = read_packed(data, tmp_path / "in-memory")
    assert not (tmp_path / "in-memory").exists()
    assert [r.path.name for r in in_memory] == [r.path.name for r in folders] == [o.name for o in originals]
    for original, a, b in zip(originals, folders, in_memory):
        assert (b.config, b.metrics, b.summary, b.diverged_round) == (a.config, a.metrics, a.summary, a.diverged_round)
        has_diagnostics = (original / "diagnostics.jsonl").is_file()
        assert (a.path / "diagnostics.jsonl").is_file() == has_diagnostics  # an empty file stays, none stays none
        if has_diagnostics:
            assert b.diagnostics_rows() == read_diagnostics(a.path) == read_diagnostics(original)
        else:
            with pytest.raises(UserError, match="recorded no algorithm diagnostics"):
                b.diagnostics_rows()
        written = write_folder(b)
        assert sorted(f.name for f in written.iterdir()) == sorted(f.name for f in a.path.iterdir())
        assert all((written / f.name).read_bytes() == f.read_bytes() for f in a.path.iterdir())
    assert any("selected" in row.get("clients", {}).get("0", {}) for row in in_memory[0].diagnostics_rows())


def test_a_good_packed_grid_still_unpacks(tmp_path: Path) -> None:
    (run_dir,) = unpack(_packed(tmp_path, [json.dumps(GOOD)]), tmp_path / "out")
    assert load_run(run_dir).metrics[0]["test_acc"] == 0.5


def test_an_xz_bomb_is_refused_while_decompressing_in_bounded_memory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 386 kB xz file took 2 GB and ended in a MemoryError: the bytes are counted as they are decompressed (the
    bound lowered to 4 MB here so that the bomb is small: 64 MB of one byte, about 10 kB packed)."""
    import tracemalloc

    from fedaccel.reproductions import snapshot

    monkeypatch.setattr(snapshot, "MAX_UNPACKED", 4 << 20)
    compressor = lzma.LZMACompressor(preset=1)
    bomb = b"".join([compressor.compress(b"[" * (1 << 20)) for _ in range(64)] + [compressor.flush()])
    assert len(bomb) < 50_000
    tracemalloc.start()
    try:
        with pytest.raises(UserError, match="decompresses to more than 4,194,304 bytes"):
            unpack(_packed(tmp_path, bomb), tmp_path / "out")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, peak
    assert not (tmp_path / "out").exists()


def _selection_run(folder: Path, with_tau: bool = True, lift: float = 0.0) -> Path:
    """A BHerd-like run ``folder/r`` of 3 rounds and 2 clients with tau = 5 local steps."""
    rows = []
    for r in range(1, 4):
        clients = {str(c): {"selected": [0, c + 1], "distance": 0.1 * r + lift} for c in range(2)}
        for values in clients.values() if with_tau else []:
            values["tau"] = 5
        rows.append({"round": r, "clients": clients})
    return _write_run(folder / "r", [{"round": 3, "test_acc": 0.5}], rows)


def test_fingerprint_sees_the_data_and_style_but_not_float_noise(tmp_path: Path) -> None:
    from fedaccel.report.diagnostics import per_client_figure

    run_dir = _selection_run(tmp_path / "now")
    assert fingerprint(selection_figure(run_dir)) == fingerprint(selection_figure(run_dir))
    # the three stale heat maps of docs/reproductions/bherd were drawn from runs that had not recorded tau
    older = _selection_run(tmp_path / "older", with_tau=False)
    assert fingerprint(selection_figure(older)) != fingerprint(selection_figure(run_dir))
    assert fingerprint(selection_figure(run_dir, title="another title")) != fingerprint(selection_figure(run_dir))
    noisy = _selection_run(tmp_path / "noisy", lift=1e-14)
    assert fingerprint(per_client_figure([noisy], "distance")) == fingerprint(per_client_figure([run_dir], "distance"))

    fig = per_client_figure([run_dir], "distance")
    before = fingerprint(fig)
    fig.axes[0].lines[0].set_linewidth(3.0)
    assert fingerprint(fig) != before


def test_pixels_ignore_png_metadata_but_not_one_pixel(tmp_path: Path) -> None:
    from PIL import Image
    from PIL.PngImagePlugin import PngInfo

    image = np.zeros((4, 5, 4), np.uint8)
    image[..., 3] = 255
    meta = PngInfo()
    meta.add_text("Software", "another version")
    Image.fromarray(image).save(tmp_path / "a.png")
    Image.fromarray(image).save(tmp_path / "b.png", pnginfo=meta)
    image[1, 2, 0] = 1
    Image.fromarray(image).save(tmp_path / "c.png")
    assert (tmp_path / "a.png").read_bytes() != (tmp_path / "b.png").read_bytes()
    assert pixels(tmp_path / "a.png") == pixels(tmp_path / "b.png") != pixels(tmp_path / "c.png")
