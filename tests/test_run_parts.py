"""Where each stretch of a resumed run ran: its parts (device and runtime from a round on), kept in its
checkpoints and named in its summary once there is more than one (a grid resumed on another machine)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from hypothesis import event, given, settings
from hypothesis import strategies as st

from fedaccel.launch import resume, run
from fedaccel.runs.checkpoint import FORMAT, checkpoint_from_plain, continued_parts, load_checkpoint, save_checkpoint
from fedaccel.runs.config import load_config
from fedaccel.runs.folder import CHECKPOINT

SMALL = ["data.dataset=digits", "model=softmax", "data.clients=3", "train.lr=0.1", "train.batch_size=20",
         "run.progress=false", "algorithm=scaffold"]
GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")


def part(start: int, device: str, runtime: str = "in-process") -> dict[str, Any]:
    return {"from_round": start, "device": device, "runtime": runtime}


def test_a_resume_drops_the_parts_after_its_checkpoint_and_continues_a_part_where_it_ran() -> None:
    before = [part(0, "cuda:0"), part(40, "cpu"), part(75, "cuda:0")]
    here = {"device": "cuda:0", "runtime": "in-process"}
    assert continued_parts([], 0, here) == [part(0, "cuda:0")]
    assert continued_parts(before, 100, here) == before  # where the last part ran: that part goes on
    assert continued_parts(before, 50, here) == [*before[:2], part(50, "cuda:0")]  # round 75's part is run again
    assert continued_parts(before, 40, here) == [part(0, "cuda:0")]  # rounds 41- run again where 1-40 ran
    assert continued_parts(before, 100, {"device": "cpu", "runtime": "stacked"}) == [*before, part(100, "cpu", "stacked")]
    assert continued_parts([], 7, here) == [part(0, "unknown", "unknown"), part(7, "cuda:0")]  # an older checkpoint's
    long = {"device": "cpu", "runtime": "x" * 150}
    assert continued_parts([], 0, long) == [part(0, "cpu", "x" * 100)]  # what a checkpoint's parts may hold
    assert continued_parts(continued_parts([], 0, long), 5, long) == [part(0, "cpu", "x" * 100)]


def _raise_rounds(path: Path, rounds: int) -> None:
    config = yaml.safe_load((path / "config.yaml").read_text())
    config["train"]["rounds"] = rounds
    (path / "config.yaml").write_text(yaml.safe_dump(config))


def test_a_run_resumed_elsewhere_names_each_part_in_its_checkpoint_and_summary(tmp_path: Path) -> None:
    """Rounds 1-2 as if on a GPU (the checkpoint's parts rewritten with fedaccel's own writer), 3-4 here on the
    CPU: the summary names both parts; a run that never moved names none."""
    path = run(load_config(None, [*SMALL, "train.rounds=2"]), tmp_path / "moved")
    summary = json.loads((path / "summary.json").read_text())
    assert "parts" not in summary and summary["device"] == "cpu"
    saved = load_checkpoint(path)
    assert saved["parts"] == [part(0, "cpu", summary["runtime"])]
    save_checkpoint(path / CHECKPOINT, saved["state"], saved["wall_s"], saved["config"], [part(0, "cuda:0", "stacked")])
    _raise_rounds(path, 4)
    resume(path, progress=False)
    summary = json.loads((path / "summary.json").read_text())
    assert summary["parts"] == [part(0, "cuda:0", "stacked"), part(2, "cpu", summary["runtime"])]
    assert load_checkpoint(path)["parts"] == summary["parts"]


@GPU
def test_a_cuda_run_resumed_on_the_cpu_names_both_devices(tmp_path: Path) -> None:
    path = run(load_config(None, [*SMALL, "train.rounds=2", "run.device=cuda"]), tmp_path / "g")
    _raise_rounds(path, 4)
    resume(path, progress=False, device="cpu")
    parts = json.loads((path / "summary.json").read_text())["parts"]
    assert [(p["from_round"], p["device"].split(":")[0]) for p in parts] == [(0, "cuda"), (2, "cpu")]


_values = st.one_of(st.none(), st.booleans(), st.integers(-3, 10**12), st.floats(allow_nan=True),
                    st.text(max_size=120), st.lists(st.integers(), max_size=3))
_ordered = st.lists(st.tuples(st.integers(0, 12), st.text(min_size=1, max_size=101), st.sampled_from(["stacked", ""])),
                    max_size=4, unique_by=lambda t: t[0]).map(
    lambda rows: [part(start, device, runtime or "in-process") for start, device, runtime in sorted(rows)])
_anything = st.lists(st.one_of(_values, st.dictionaries(st.sampled_from(["from_round", "device", "runtime", "extra"]),
                                                       _values, max_size=4),
                               st.builds(part, st.integers(-2, 12), st.text(max_size=110), st.text(max_size=3))),
                     max_size=6)
_parts = st.sampled_from([_ordered, _anything, _values]).flatmap(lambda kind: kind)  # a third each


@settings(max_examples=300, deadline=None)
@given(parts=_parts, at_round=st.integers(0, 40))
def test_any_parts_in_a_checkpoint_from_someone_else_are_refused_or_fit(parts: Any, at_round: int) -> None:
    """Parts from a folder someone handed over: refused as "not a fedaccel checkpoint" (one line on resume),
    or in order, none after the checkpoint's round, with short names, and continued as parts are."""
    saved = {"format": FORMAT, "wall_s": 1.0, "parts": parts, "config": {},
             "state": {"round": at_round, "w": torch.zeros(3), "server": {"$tuple": []},
                       "clients": [], "totals": {}}}
    try:
        loaded = checkpoint_from_plain(saved)
    except ValueError as refused:
        assert str(refused) == "not a fedaccel checkpoint"
        event("refused")
        return
    event(f"accepted, {len(loaded['parts'])} part(s)")
    starts = [p["from_round"] for p in loaded["parts"]]
    assert starts == sorted(set(starts)) and all(0 <= s <= at_round for s in starts)
    assert all(0 < len(p["device"]) <= 100 and 0 < len(p["runtime"]) <= 100 for p in loaded["parts"])
    again = continued_parts(loaded["parts"], at_round, {"device": "cpu", "runtime": "in-process"})
    assert again[-1]["device"] == "cpu" and [p["from_round"] for p in again] == sorted({p["from_round"] for p in again})
