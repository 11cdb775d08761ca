"""Crafted and damaged run files (issue 29, items 5 and 6): every reader of a run folder —
``run --resume``, ``compare``, ``plot``, ``judge``, ``tensorboard`` — answers a hostile
``metrics.jsonl``, ``summary.json``, ``diagnostics.jsonl``, ``config.yaml``, experiment or claims
file with one line and exit status 2, in bounded time and memory, and changes nothing (not the
folder it refuses, not anything beside it). Damage is reported, never amplified: ``--resume``
never deletes valid rows to get past a damaged one.

The hostile inputs are generated (Hypothesis) at sizes that blew up before the bounds existed: a
round of 10^12 built a set of every round up to it, 100,000-deep nesting overflowed the stack.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, Phase, event, example, given, settings
from hypothesis import strategies as st
from test_hostile import SMALL
from test_judge import CLAIMS, LR, write_grid

from fedaccel.cli import main
from fedaccel.grids.experiment import cell_name
from fedaccel.errors import UserError, shown
from fedaccel.launch import run
from fedaccel.runs.checkpoint import load_checkpoint, save_checkpoint
from fedaccel.runs.config import load_config
from fedaccel.runs.folder import CHECKPOINT, PREVIOUS_CHECKPOINT
from fedaccel.runs.rows import MAX_DEPTH, MAX_INT_DIGITS, _count, _counts, parse_json

ROUNDS = 6
PEAK_BYTES = 64 * 2**20  # Python memory a refusal may take (a set of 10^8 rounds took 6 GB)
SECONDS = 10.0  # a refusal's time on a busy machine (a round of 5*10^7 took 31 s)

CRAFTED = settings(max_examples=10, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
                   suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
# deadline=None: `refused` bounds each example's time and memory itself (with tracemalloc), and says which
# damage it was; no shrinking: each example is already one damage, named by the function's name


def named(damage: Callable[[Path], None], name: str) -> Callable[[Path], None]:
    """``damage`` with a name Hypothesis prints for a failing example."""
    damage.__name__ = damage.__qualname__ = name[:120]
    return damage


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished BHerd run (it writes diagnostics), evaluated every round, checkpointed at rounds 3
    and 6; each example works on a copy."""
    path = run(load_config(None, [*SMALL, "algorithm=bherd", f"train.rounds={ROUNDS}", "run.checkpoint_every=3"]),
               tmp_path_factory.mktemp("crafted") / "run")
    assert main(["run", "--resume", str(path), "--no-progress"]) == 0  # the resume path warmed up once
    return path


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A judged grid (test_judge's hand-made runs and claims)."""
    return write_grid(tmp_path_factory.mktemp("crafted") / "grid", CLAIMS)


# ---------------------------------------------------------------------------------------------
# What a hostile value is: JSON text that no fedaccel file holds where it is put.
# ---------------------------------------------------------------------------------------------

HUGE_INT = st.integers(MAX_INT_DIGITS + 1, 6000).map(lambda n: "9" * n)
DEEP = st.tuples(st.integers(MAX_DEPTH + 1, 100_000), st.sampled_from(["[]", "{}"])).map(
    lambda d: ('[' * d[0] + ']' * d[0]) if d[1] == "[]" else '{"a": ' * d[0] + "1" + "}" * d[0])
WRONG_TYPE = st.sampled_from(['"abc"', "[1, 2]", '{"a": 1}', "true", "null", '"0.9"'])
BAD_ROUND = st.one_of(WRONG_TYPE, HUGE_INT, DEEP, st.sampled_from(["-1", "1e12", "50000000", "1000000000000", "3.5"]))
BAD_COLUMN = st.one_of(WRONG_TYPE, HUGE_INT, DEEP)
NOT_UTF8 = st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x80\x80"])


def cell(setup: str, seed: int) -> str:
    """The folder of test_judge's grid cell ``setup`` at ``seed``."""
    return cell_name({"train.lr": LR[setup], "run.seed": seed})


def lines_of(file: Path) -> list[str]:
    return file.read_text().splitlines()


def with_value(line: str, column: str, text: str) -> str:
    """The JSON row ``line`` with ``column`` set to the raw JSON ``text``."""
    row = json.loads(line)
    row[column] = "@@"
    return json.dumps(row).replace('"@@"', text, 1)


@st.composite
def damaged_rows(draw: st.DrawFn, columns: tuple[str, ...]) -> Callable[[Path], None]:
    """A way to damage a JSON-lines file of rows: a known column or the round of one row made
    hostile, a line before the last cut short or replaced, bytes that are not UTF-8, or a folder
    in its place."""
    kind = draw(st.sampled_from(["column", "round", "torn", "not-an-object", "bytes", "folder"]))
    where = draw(st.floats(0, 1))  # which line, as a fraction of the file
    column = draw(st.sampled_from(columns))
    value = draw(BAD_ROUND if kind == "round" else BAD_COLUMN)
    other = draw(st.sampled_from(["[1]", "3", '"row"', "null"]))
    bad = draw(NOT_UTF8)

    def damage(file: Path) -> None:
        lines = lines_of(file)
        i = min(int(where * len(lines)), len(lines) - 1)
        if kind == "folder":
            file.unlink()
            file.mkdir()
            return
        if kind == "bytes":
            data = file.read_bytes()
            at = int(where * len(data))
            file.write_bytes(data[:at] + bad + data[at:])
            return
        if kind == "torn":  # cut short, with rows after it: not what a kill leaves
            i = min(i, len(lines) - 2)
            lines[i] = lines[i][: max(1, int(where * (len(lines[i]) - 1)))]
        elif kind == "not-an-object":
            lines[i] = other
        elif kind == "column" and column in json.loads(lines[i]):
            lines[i] = with_value(lines[i], column, value)
        else:  # the round, or a column this row lacks: every hostile column value is a hostile round too
            lines[i] = with_value(lines[i], "round", value)
        file.write_text("".join(line + "\n" for line in lines))

    return named(damage, f"{kind}_{column}_at_{where:.2f}_{value[:40] if kind in ('column', 'round') else other}")


@st.composite
def damaged_client_values(draw: st.DrawFn) -> Callable[[Path], None]:
    """A way to damage what a diagnostics row says of its clients: not a mapping, or a per-client
    value of the wrong type or size (a heat map as wide as ``tau``, a client id as the column)."""
    key, value = draw(st.sampled_from([
        ("clients", [1, 2]), ("clients", {"0": 3}), ("selected", "abc"), ("selected", [10**12]),
        ("selected", [-1]), ("tau", 10**12), ("tau", "18"), ("distance", "far"), ("distance", [1.0]),
    ]))
    where = draw(st.floats(0, 1))

    def damage(file: Path) -> None:
        rows = [json.loads(line) for line in lines_of(file)]
        row = rows[min(int(where * len(rows)), len(rows) - 1)]
        if key == "clients":
            row["clients"] = value
        else:
            row["clients"][next(iter(row["clients"]))][key] = value
        file.write_text("".join(json.dumps(r) + "\n" for r in rows))

    return named(damage, f"client_{key}_{shown(value, 40)}_at_{where:.2f}")


@st.composite
def damaged_document(draw: st.DrawFn) -> Callable[[Path], None]:
    """A way to damage ``summary.json``: too deep, a huge integer, not UTF-8, a folder."""
    kind = draw(st.sampled_from(["deep", "huge", "bytes", "folder"]))
    deep, huge, bad = draw(DEEP), draw(HUGE_INT), draw(NOT_UTF8)

    def damage(file: Path) -> None:
        if kind == "folder":
            file.unlink()
            file.mkdir()
        elif kind == "bytes":
            file.write_bytes(b'{"finished": true, "rounds": ' + bad + b"}")
        else:
            file.write_text(f'{{"finished": true, "final": {deep if kind == "deep" else huge}}}')

    return named(damage, f"summary_{kind}")


@st.composite
def damaged_yaml(draw: st.DrawFn) -> Callable[[Path], None]:
    """A way to damage ``config.yaml``: not UTF-8, a folder, nested thousands deep, a number
    where a mapping belongs."""
    kind = draw(st.sampled_from(["bytes", "folder", "deep", "scalar"]))
    depth, bad = draw(st.integers(5_000, 50_000)), draw(NOT_UTF8)

    def damage(file: Path) -> None:
        if kind == "folder":
            file.unlink()
            file.mkdir()
        elif kind == "bytes":
            file.write_bytes(file.read_bytes() + b"name: " + bad + b"\n")
        elif kind == "deep":
            file.write_text("train: " + "[" * depth + "]" * depth + "\n")
        else:
            file.write_text("12345\n")

    return named(damage, f"config_{kind}")


METRIC_COLUMNS = ("test_acc", "test_loss", "train_loss", "train_acc", "bytes_up", "wall_s", "round")


# ---------------------------------------------------------------------------------------------
# How a command is judged: one line, status 2, bounded, nothing changed anywhere.
# ---------------------------------------------------------------------------------------------


def snapshot(root: Path) -> dict[str, str]:
    """Every path under ``root`` and a hash of each file's bytes (a run's ``.lock`` aside: a
    refused resume may leave that empty file, as any resume does)."""
    seen = {}
    for path in sorted(root.rglob("*")):
        if path.name == ".lock":
            continue
        seen[str(path.relative_to(root))] = (hashlib.sha256(path.read_bytes()).hexdigest()
                                             if path.is_file() and not path.is_symlink() else "folder")
    return seen


@contextmanager
def workspace(source: Path) -> Iterator[tuple[Path, Path]]:
    """A fresh copy of ``source`` (a run or grid folder) in a temporary root that also holds a
    file of the user's and the working directory; yields (copy, root)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        copy = root / source.name
        shutil.copytree(source, copy)
        (root / "notes.txt").write_text("the user's own file\n")
        (root / "cwd").mkdir()
        cwd = os.getcwd()
        os.chdir(root / "cwd")
        try:
            yield copy, root
        finally:
            os.chdir(cwd)


def refused(argv: list[str], root: Path, capsys: pytest.CaptureFixture) -> str:
    """Run ``fedaccel argv`` in this process: it must exit 2 with one line on stderr, within the
    time and Python memory bounds, leaving ``root`` as it was. Returns the line."""
    before = snapshot(root)
    capsys.readouterr()
    tracemalloc.start()
    started = time.perf_counter()
    try:
        status = main(argv)
    except SystemExit as exc:  # argparse
        status = exc.code
    finally:
        seconds = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("resuming ")]
    assert status == 2, err[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error: "), err[-2000:]
    assert seconds < SECONDS, f"{seconds:.1f} s: {lines[0]}"
    assert peak < PEAK_BYTES, f"{peak / 2**20:.0f} MB: {lines[0]}"
    assert snapshot(root) == before, lines[0]
    return lines[0]


# ---------------------------------------------------------------------------------------------
# The properties
# ---------------------------------------------------------------------------------------------


def bounded_the_slow_way(text: str) -> Any:
    """What :func:`parse_json` promises, by the plain definition: every integer checked as it is parsed, every
    container's depth counted."""
    def checked(digits: str) -> int:
        if len(digits.lstrip("-")) > MAX_INT_DIGITS:
            raise ValueError("integer")
        return int(digits)

    value = json.loads(text, parse_int=checked)
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            if depth > MAX_DEPTH:
                raise ValueError("deep")
            stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
    return value


JSON_LEAVES = (st.none() | st.booleans() | st.floats(allow_nan=False) | st.text("[]{}\"0123456789a\u00e9", max_size=40)
               | st.integers(1, 45).map(lambda n: "7" * n).map(lambda d: int(d)))


@settings(max_examples=300, deadline=None)
@given(value=st.recursive(JSON_LEAVES, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
           st.text("[{0123456789", max_size=35), inner, max_size=3), max_leaves=12),
       wrap=st.integers(0, MAX_DEPTH + 2), outer=st.sampled_from(["[", '{"k": ']))
def test_parse_json_accepts_and_refuses_what_the_slow_definition_does(value: Any, wrap: int, outer: str) -> None:
    """Any value (long integers, digits and brackets in strings and keys, long float mantissas), wrapped in up to
    MAX_DEPTH + 2 more levels: the quick checks give the value, or refuse, exactly as the plain definition (on
    texts without a duplicate key: see the next test)."""
    text = outer * wrap + json.dumps(value) + ("]" if outer == "[" else "}") * wrap
    try:
        want: Any = bounded_the_slow_way(text)
    except ValueError:
        want = ValueError
    try:
        got: Any = parse_json(text)
    except ValueError:
        got = ValueError
    assert got == want or (got is not ValueError and json.dumps(got) == json.dumps(want))


@pytest.mark.parametrize("dropped", ["[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "1" * (MAX_INT_DIGITS + 1)])
def test_a_duplicate_keys_dropped_value_is_held_to_the_bounds_too(dropped: str) -> None:
    """json.loads keeps a duplicate key's last value; the bounds are checked on the whole text, so a deep or long
    value is refused even where the parsed object would no longer hold it."""
    with pytest.raises(ValueError):
        parse_json('{"a": ' + dropped + ', "a": 1}')
    assert parse_json('{"a": [], "a": 1}') == {"a": 1}


@given(values=st.lists(st.integers(-3, 12) | st.booleans() | st.none() | st.floats(0, 12) | st.text(max_size=2),
                       max_size=8).map(lambda v: json.loads(json.dumps(v))))
def test_a_list_of_counts_is_checked_as_each_count_would_be(values: list[Any]) -> None:
    """What JSON gives (ints, booleans, floats such as 3.0, null, text): the list's check in C agrees with the check
    of each item."""
    assert _counts(values, 10) == all(_count(v, 10) for v in values)


@CRAFTED
@given(damage=damaged_rows(METRIC_COLUMNS), command=st.sampled_from(["resume", "compare", "plot", "tensorboard"]))
def test_a_damaged_metrics_file_is_one_line_for_every_reader(
    finished: Path, damage: Callable[[Path], None], command: str, capsys: pytest.CaptureFixture
) -> None:
    with workspace(finished) as (path, root):
        damage(path / "metrics.jsonl")
        refused(reader(command, path), root, capsys)


@CRAFTED
@given(damage=st.one_of(damaged_rows(("clients", "round")), damaged_client_values()),
       command=st.sampled_from(["resume", "plot-diagnostics", "tensorboard"]))
def test_a_damaged_diagnostics_file_is_one_line_for_every_reader(
    finished: Path, damage: Callable[[Path], None], command: str, capsys: pytest.CaptureFixture
) -> None:
    with workspace(finished) as (path, root):
        damage(path / "diagnostics.jsonl")
        refused(reader(command, path), root, capsys)


@CRAFTED
@given(damage=damaged_document(), command=st.sampled_from(["compare", "plot", "judge"]))
def test_a_damaged_summary_is_one_line_for_every_reader(
    finished: Path, grid: Path, damage: Callable[[Path], None], command: str, capsys: pytest.CaptureFixture
) -> None:
    with workspace(grid if command == "judge" else finished) as (path, root):
        damage((path / cell("fast", 0) if command == "judge" else path) / "summary.json")
        refused(reader(command, path), root, capsys)


@CRAFTED
@given(damage=damaged_rows(("test_acc", "train_loss", "round")))
def test_a_damaged_metrics_file_in_a_grid_is_one_line_for_judge(
    grid: Path, damage: Callable[[Path], None], capsys: pytest.CaptureFixture
) -> None:
    with workspace(grid) as (path, root):
        damage(path / cell("slow", 3) / "metrics.jsonl")
        refused(reader("judge", path), root, capsys)


@CRAFTED
@given(damage=damaged_yaml(), command=st.sampled_from(["resume", "compare", "plot", "tensorboard"]))
def test_a_damaged_config_is_one_line_for_every_reader(
    finished: Path, damage: Callable[[Path], None], command: str, capsys: pytest.CaptureFixture
) -> None:
    with workspace(finished) as (path, root):
        damage(path / "config.yaml")
        refused(reader(command, path), root, capsys)


EDITS = {  # a config.yaml edited under a checkpoint: each changes the numbers, or the state's shape
    "algorithm": {"name": "scaffold"}, "model": {"name": "svm", "l2": 0.1}, "train.lr": 0.3,
    "data.clients": 5, "eval.every": 2, "run.seed": 7,
}  # not train.rounds: a run may continue for more rounds (test_device's resume on the CPU does)
NAMED = {"algorithm": "algorithm.name", "model": "model.name"}  # the flat key a line names for each edit


@CRAFTED
@given(keys=st.lists(st.sampled_from(sorted(EDITS)), min_size=1, max_size=3, unique=True),
       recorded=st.booleans())
def test_a_config_changed_under_a_checkpoint_is_refused_naming_the_keys(
    finished: Path, keys: list[str], recorded: bool, capsys: pytest.CaptureFixture
) -> None:
    """With the config the checkpoint recorded, the line names the keys; a checkpoint of an earlier
    fedaccel (no config recorded) is still refused in one line when the state's shape differs."""
    with workspace(finished) as (path, root):
        (path / "summary.json").unlink()  # killed after its last checkpoint: --resume loads it
        config = yaml.safe_load((path / "config.yaml").read_text())
        for key in keys:
            node, *rest = key.split(".")
            if rest:
                config[node][rest[0]] = EDITS[key]
            else:
                config[node] = EDITS[key]
        (path / "config.yaml").write_text(yaml.safe_dump(config))
        if not recorded:
            for name in (CHECKPOINT, PREVIOUS_CHECKPOINT):
                saved = load_checkpoint(path)
                assert saved is not None
                save_checkpoint(path / name, saved["state"], saved["wall_s"])  # as before configs were kept
        try:
            line = refused(["run", "--resume", str(path), "--no-progress"], root, capsys)
        except AssertionError:
            if recorded or not same_shape(keys):
                raise
            return  # no config to compare and the same shape: nothing to tell it by (old checkpoints)
        if recorded:
            assert all(NAMED.get(key, key) in line for key in keys), line


DEEP_YAML = st.integers(1_000, 20_000).map(lambda n: "[" * n + "]" * n)
HUGE_YAML = st.integers(4_400, 6_000).map(lambda n: "9" * n)  # past Python's 4,300-digit int() limit
WRONG_YAML = ["abc", "[1, 2]", "{x: 1}", "true", "null", ".inf", ".nan", "-1", "1e400"]
NOT_A_CLAIM_VALUE = {  # per claim key, YAML values it never takes (a valid one would be judged: exit 0)
    "margin": ["abc", "[1, 2]", "{x: 1}", "true", "null", ".inf", ".nan", "-1"],
    "value": ["abc", "[1, 2]", "{x: 1}", "null"],
    "expect": WRONG_YAML,
    "a": ["abc", "[1, 2]", "true", "null", "-1"],
    "b": ["abc", "[1, 2]", "true", "null", "-1"],
    "measure": ["abc", "[1, 2]", "{x: 1}", "true", "null", "-1", "{rounds_to: abc}"],
    "detect": ["abc", "[1, 2]", "{x: 1}", "true"],
}


@st.composite
def damaged_experiment(draw: st.DrawFn) -> Callable[[Path], None]:
    """A way to damage a grid's ``experiment.yaml`` (what ``judge`` reads its claims from): a claim
    key given a value it never takes, a huge or deep value, bytes that are not UTF-8, a folder."""
    kind = draw(st.sampled_from(["claim", "huge", "deep", "bytes", "folder"]))
    key = draw(st.sampled_from(sorted(NOT_A_CLAIM_VALUE)))
    text = {"claim": st.sampled_from(NOT_A_CLAIM_VALUE[key]), "huge": HUGE_YAML, "deep": DEEP_YAML}.get(kind)
    value = draw(text) if text is not None else ""
    bad = draw(NOT_UTF8)

    def damage(file: Path) -> None:
        if kind == "folder":
            file.unlink()
            file.mkdir()
            return
        if kind == "bytes":
            file.write_bytes(file.read_bytes() + b"description: " + bad + b"\n")
            return
        experiment = yaml.safe_load(file.read_text())
        experiment["claims"][0][key] = "@@"
        file.write_text(yaml.safe_dump(experiment, sort_keys=False, width=10**9).replace("'@@'", value, 1))

    return named(damage, f"experiment_{kind}_{key}_{value[:40]}")


@CRAFTED
@given(damage=damaged_experiment(), plan=st.booleans())
def test_a_damaged_experiment_file_is_one_line_for_judge(
    grid: Path, damage: Callable[[Path], None], plan: bool, capsys: pytest.CaptureFixture
) -> None:
    with workspace(grid) as (path, root):
        damage(path / "experiment.yaml")
        refused(["judge", str(path), *(["--plan"] if plan else [])], root, capsys)


@CRAFTED
@given(sizes=st.lists(st.integers(2, 400), min_size=2, max_size=6).filter(lambda s: math.prod(s) > 100_000),
       hostile=st.sampled_from(["", "bytes", "deep"]))
def test_a_damaged_or_huge_grid_is_one_line_for_experiment(
    tmp_path_factory: pytest.TempPathFactory, sizes: list[int], hostile: str, capsys: pytest.CaptureFixture
) -> None:
    """A grid beyond 100,000 cells is refused before a cell is built or a folder made, whatever its
    shape; so is one whose file is not UTF-8 or nested thousands deep."""
    root = tmp_path_factory.mktemp("grid")
    grid = {f"train.k{i}": list(range(n)) for i, n in enumerate(sizes)}
    text = yaml.safe_dump({"name": "g", "out_dir": str(root / "out"), "grid": grid}, default_flow_style=True)
    if hostile == "bytes":
        text = text.replace("name: g", "name: \udcff")
    elif hostile == "deep":
        text += "description: " + "[" * 5000 + "]" * 5000 + "\n"
    (root / "g.yaml").write_bytes(text.encode("utf-8", "surrogateescape"))
    line = refused(["experiment", str(root / "g.yaml")], root, capsys)
    assert hostile or f"{math.prod(sizes):,} cells" in line


def same_shape(keys: list[str]) -> bool:
    """Edits that leave the checkpoint's shape as it was (only a recorded config can tell them)."""
    return not {"algorithm", "model", "data.clients"} & set(keys)


def reader(command: str, path: Path) -> list[str]:
    """The command line of ``command`` on the run or grid folder ``path``."""
    return {
        "resume": ["run", "--resume", str(path), "--no-progress"],
        "compare": ["compare", str(path)],
        "plot": ["plot", str(path), "-o", str(path.parent / "cwd" / "curves.png")],
        "plot-diagnostics": ["plot", str(path), "--diagnostics", "-o", str(path.parent / "cwd" / "curves.png")],
        "tensorboard": ["tensorboard", str(path)],
        "judge": ["judge", str(path)],
    }[command]


# ---------------------------------------------------------------------------------------------
# The cases the issue measured, one by one
# ---------------------------------------------------------------------------------------------


def test_resume_refuses_a_torn_row_in_the_middle_and_deletes_nothing(
    finished: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    with workspace(finished) as (path, root):
        (path / "summary.json").unlink()
        lines = lines_of(path / "metrics.jsonl")
        lines[3] = lines[3][:20]  # the row of round 3, of rounds 0..6
        (path / "metrics.jsonl").write_text("".join(line + "\n" for line in lines))
        line = refused(["run", "--resume", str(path), "--no-progress"], root, capsys)
        assert "metrics.jsonl:4:" in line and "3 row(s) after it" in line and "nothing was changed" in line


def test_resume_still_repairs_a_cut_short_last_row(finished: Path, capsys: pytest.CaptureFixture) -> None:
    """What a kill leaves (half a last line) is repaired as before: the checkpoint's round is
    evaluated again and the run ends as the uninterrupted one."""
    with workspace(finished) as (path, _):
        (path / "summary.json").unlink()
        whole = lines_of(path / "metrics.jsonl")
        (path / "metrics.jsonl").write_text("".join(line + "\n" for line in whole[:-1]) + whole[-1][:30])
        assert main(["run", "--resume", str(path), "--no-progress"]) == 0
        repaired = [json.loads(line) for line in lines_of(path / "metrics.jsonl")]
        assert [row["round"] for row in repaired] == list(range(ROUNDS + 1))
        assert repaired[-1]["test_acc"] == json.loads(whole[-1])["test_acc"] and repaired[-1]["reevaluated"]
        assert lines_of(path / "metrics.jsonl")[:-1] == whole[:-1]  # the other rows byte for byte


@pytest.mark.parametrize("round_", ["50000000", "1e12", "1000000000000"])
def test_a_crafted_round_is_refused_quickly_in_bounded_memory(
    finished: Path, round_: str, capsys: pytest.CaptureFixture
) -> None:
    with workspace(finished) as (path, root):
        lines = lines_of(path / "metrics.jsonl")
        lines[-1] = with_value(lines[-1], "round", round_)
        (path / "metrics.jsonl").write_text("".join(line + "\n" for line in lines))
        line = refused(["compare", str(path)], root, capsys)
        assert "round" in line


def test_a_grid_of_ten_billion_cells_is_refused_before_one_is_built(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = ["train.lr", "train.batch_size", "run.seed", "train.momentum", "train.weight_decay"]
    experiment = {"name": "bomb", "grid": {key: list(range(1, 101)) for key in keys}}
    (tmp_path / "bomb.yaml").write_text(yaml.safe_dump(experiment, default_flow_style=True, width=10**6))
    assert (tmp_path / "bomb.yaml").stat().st_size < 3000
    line = refused(["experiment", str(tmp_path / "bomb.yaml")], tmp_path, capsys)
    assert "10,000,000,000 cells" in line and "FEDACCEL_MAX_CELLS" in line
    small = {"name": "small", "grid": {"run.seed": [0, 1, 2], "train.lr": [0.1, 0.2]}}
    (tmp_path / "small.yaml").write_text(yaml.safe_dump(small))
    monkeypatch.setenv("FEDACCEL_MAX_CELLS", "5")
    assert "6 cells" in refused(["experiment", str(tmp_path / "small.yaml")], tmp_path, capsys)
    from fedaccel.grids.experiment import load_experiment

    monkeypatch.setenv("FEDACCEL_MAX_CELLS", "6")
    assert len(load_experiment(tmp_path / "small.yaml").cells) == 6  # the user's limit, not the file's


def test_compare_with_a_metric_no_run_records_is_one_line(finished: Path, capsys: pytest.CaptureFixture) -> None:
    with workspace(finished) as (path, root):
        assert "test_acc" in refused(["compare", str(path), "--metric", "unknown"], root, capsys)


def test_plot_into_a_folder_that_does_not_exist_is_refused_and_creates_nothing(
    finished: Path, capsys: pytest.CaptureFixture
) -> None:
    with workspace(finished) as (path, root):
        line = refused(["plot", str(path), "-o", str(root / "no" / "such" / "x.png")], root, capsys)
        assert "does not exist" in line and not (root / "no").exists()


def test_certs_with_an_empty_host_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    refused(["certs", str(tmp_path / "tls"), "--clients", "2", "--host", ""], tmp_path, capsys)


def test_a_write_past_the_file_size_limit_is_one_line(
    capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ulimit -f``: Python ignores SIGXFSZ, so the write fails with EFBIG; one line naming the file."""
    import errno

    import fedaccel.report.reading as reading

    def too_big(*args: object, **kwargs: object) -> str:
        raise OSError(errno.EFBIG, "File too large", "/runs/x/metrics.jsonl")

    # imported before the patch: imported under it (compare's first), figures would keep the patched load_runs
    # for the rest of the process (`fedaccel plot` failed in a later test of the same worker)
    import fedaccel.report.figures  # noqa: F401
    monkeypatch.setattr(reading, "load_runs", too_big)  # the first thing compare does
    capsys.readouterr()
    assert main(["compare", "x"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ulimit -f" in err[0] and "/runs/x/metrics.jsonl" in err[0]


@pytest.mark.parametrize("claim", [
    {"measure": "no_such_column"},
    {"measure": "final_test_acc", "expect": "equal", "margin": float("inf"), "why": "w"},
    {"measure": {"rounds_to": "abc"}},
])
def test_a_crafted_claim_is_one_line_for_judge(grid: Path, claim: dict, capsys: pytest.CaptureFixture) -> None:
    """Only the one-line behaviour (claims.py's checks at load belong to their own tests)."""
    with workspace(grid) as (path, root):
        experiment = yaml.safe_load((path / "experiment.yaml").read_text())
        experiment["claims"] = [{**CLAIMS[0], **claim}]
        (path / "experiment.yaml").write_text(yaml.safe_dump(experiment))
        refused(["judge", str(path)], root, capsys)


def test_certs_without_the_cryptography_package_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """On a machine without Flower's `cryptography` (the GPU machine had none) `certs` was a traceback."""
    import sys

    monkeypatch.delitem(sys.modules, "fedaccel.flower.security", raising=False)
    monkeypatch.setitem(sys.modules, "cryptography", None)
    line = refused(["certs", str(tmp_path / "tls"), "--clients", "1"], tmp_path, capsys)
    assert "cryptography" in line and "fedaccel[flower]" in line, line


class Hung(BaseException):
    """A reader still waiting when the alarm rang (a BaseException: no ``except OSError`` turns it into a line)."""


@contextmanager
def alarm(seconds: float) -> Iterator[None]:
    """Raise :class:`Hung` in this thread after ``seconds``: a reader blocked on a FIFO fails the test, never hangs it."""
    import signal

    def ring(*_: Any) -> None:
        raise Hung(f"still reading after {seconds} s")

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


FIFO_CASES = [("summary.json", c) for c in ("compare", "plot", "judge")] + [
    ("diagnostics.jsonl", c) for c in ("plot-diagnostics", "tensorboard", "resume")] + [
    ("metrics.jsonl", c) for c in ("compare", "plot", "judge", "tensorboard", "resume")] + [("config.yaml", "compare")]


@pytest.mark.parametrize(("name", "command"), FIFO_CASES)
def test_a_fifo_in_a_run_folder_is_one_line_for_every_reader_never_a_hang(
    finished: Path, grid: Path, name: str, command: str, capsys: pytest.CaptureFixture
) -> None:
    """Issue 47, item 2: ``tar`` keeps FIFOs, so a received folder may hold one where a file belongs; every reader
    refuses it in one line without waiting for a writer that never comes (the readers hung before)."""
    with workspace(grid if command == "judge" else finished) as (path, root), alarm(30):
        target = (path / cell("fast", 0) if command == "judge" else path) / name
        target.unlink(missing_ok=True)
        os.mkfifo(target)
        line = refused(reader(command, path), root, capsys)
    assert name in line, line


RESUME_FILES = ("summary.json", "model.pt", CHECKPOINT, PREVIOUS_CHECKPOINT, "metrics.jsonl", "diagnostics.jsonl")


@st.composite
def damaged_run(draw: st.DrawFn) -> Callable[[Path], None]:
    """A finished run damaged as a kill, a careless hand or a colleague's copy leaves it: some of its files removed,
    its rows cut to their first few lines (none: empty)."""
    removed = draw(st.sets(st.sampled_from(RESUME_FILES), max_size=4))
    kept = {name: draw(st.none() | st.integers(0, ROUNDS + 1)) for name in ("metrics.jsonl", "diagnostics.jsonl")}

    def damage(path: Path) -> None:
        for name in removed:
            (path / name).unlink(missing_ok=True)
        for name, lines in kept.items():
            if lines is not None and (path / name).exists():
                (path / name).write_text("".join(line + "\n" for line in lines_of(path / name)[:lines]))

    return named(damage, f"removed_{sorted(removed)}_kept_lines_{kept}")


@settings(max_examples=25, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(damage=damaged_run())
@example(damage=named(lambda path: ([(path / n).unlink() for n in ("summary.json", "model.pt")],
                                    (path / "metrics.jsonl").write_text("")), "the_issue_s_empty_metrics"))
def test_a_refused_resume_changes_nothing_whatever_the_damage(
    finished: Path, damage: Callable[[Path], None], capsys: pytest.CaptureFixture
) -> None:
    """Issue 47, item 5: `run --resume` of a run whose metrics.jsonl was emptied (summary and model removed) wrote
    row 6, model.pt and a finished summary, then refused ("round 1 is missing"). Whatever the damage, a resume either
    finishes the run or refuses in one line with every byte of the folder as it was."""
    with workspace(finished) as (path, root):
        damage(path)
        before = snapshot(root)
        capsys.readouterr()
        status = main(["run", "--resume", str(path), "--no-progress"])
        err = capsys.readouterr().err
        event(f"exit status {status}")
        if status != 0:
            lines = [line for line in err.splitlines() if line.startswith("error: ")]
            assert status == 2 and len(lines) == 1, err[-2000:]
            assert snapshot(root) == before, lines[0]


def test_a_fifo_given_as_the_png_is_one_line_never_a_hang(finished: Path, capsys: pytest.CaptureFixture) -> None:
    """`plot -o` reads the first bytes of a file it would replace (is it a PNG?): a FIFO there is refused unopened."""
    with workspace(finished) as (path, root), alarm(30):
        os.mkfifo(root / "cwd" / "curves.png")
        line = refused(reader("plot", path), root, capsys)
    assert "curves.png is not a plain file" in line, line


@settings(max_examples=80, deadline=None)
@given(trained_at=st.none() | st.lists(st.integers(-2, 5) | st.booleans() | st.floats(0, 4) | st.text(max_size=1),
                                       max_size=4) | st.text(max_size=3))
def test_a_checkpoints_rounds_of_the_clients_states_are_taken_only_if_they_could_be_its_own(trained_at: Any) -> None:
    """A Flower checkpoint names the round each client last trained in (its states of then are what a resume
    restores): a list of one round per client, none past the checkpoint's own; anything else is damage."""
    import torch

    from fedaccel.engine.round import FLState

    state = FLState(round=3, w=torch.zeros(2), server=(), clients=[(), (), ()])
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        save_checkpoint(folder / CHECKPOINT, state, 0.0, trained_at=trained_at)
        fits = trained_at is None or (isinstance(trained_at, list) and len(trained_at) == 3 and all(
            type(r) is int and 0 <= r <= 3 for r in trained_at))
        if fits:
            assert load_checkpoint(folder)["trained_at"] == trained_at
        else:
            with pytest.raises(UserError, match="no checkpoint in .* loads"):
                load_checkpoint(folder)


def test_a_checkpoint_whose_config_was_taken_out_is_damaged_not_an_old_one(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture) -> None:
    """A checkpoint without its config was taken for one of a fedaccel before configs were recorded, and checked by
    shape only: an edited lr ran. One that records where its rounds ran (parts, which came after configs) and no
    config is damaged: skipped, named."""
    import torch

    from fedaccel.engine.round import FLState

    state = FLState(round=2, w=torch.zeros(2), server=(), clients=[()])
    save_checkpoint(tmp_path / CHECKPOINT, state, 0.0, parts=[{"from_round": 0, "device": "cpu",
                                                              "runtime": "in-process"}])
    with pytest.raises(UserError, match="no checkpoint in .* loads"):
        load_checkpoint(tmp_path)
    assert "its config is missing" in capsys.readouterr().err
    save_checkpoint(tmp_path / CHECKPOINT, state, 0.0)  # as before configs were kept: taken
    assert load_checkpoint(tmp_path)["config"] is None
