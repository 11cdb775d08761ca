"""Committed copies of runs (pack / unpack) and the fingerprints of figures and PNGs."""

from __future__ import annotations

import json
import lzma
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedaccel.errors import ConfigError, UserError
from fedaccel.launch import run
from fedaccel.report.diagnostics import read_diagnostics, selection_figure
from fedaccel.report.reading import load_run
from fedaccel.reproductions.snapshot import fingerprint, pack, pixels, unpack
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
