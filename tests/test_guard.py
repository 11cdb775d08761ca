"""A plugin's stages are checked where they hand a value back (fedaccel.algorithms.guard): a wrong kind, shape,
dtype or device is one line naming the algorithm, the part and the stage, on every local runtime; the parts a
plugin reuses from fedaccel are left as they are."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from plugin_site import forget, install

from fedaccel.algorithms.base import ClientUpdate, Part, compose
from fedaccel.algorithms.guard import CHECKS, StageFault, guarded
from fedaccel.algorithms.mean import mean_aggregate
from fedaccel.algorithms.registry import build_algorithm
from fedaccel.cli import main

W = torch.zeros(5)
UPDATE = ClientUpdate(0, 1.0, 1, torch.zeros(5))
# each stage's arguments as a runtime passes them (the reference tensor where the value must be like one)
ARGS = {"init_server": (W,), "init_client": (W,), "local_term": (None, W, None, None),
        "start": (None, W, W, None, None), "upload": (None, W, None), "aggregate": (None, W, [UPDATE]),
        "server_end": (None, W, W, [UPDATE], None), "client_end": (None, W, W, W, None, None),
        "server_adjust": (None, [UPDATE], None)}

tensors = st.builds(lambda shape, dtype, device: torch.zeros(shape, dtype=dtype, device=device),
                    st.sampled_from([(5,), (4,), (1, 5), (), (5, 1)]),
                    st.sampled_from([torch.float32, torch.float64, torch.int64]),
                    st.sampled_from(["cpu", "cpu", "meta"]))  # meta: another device, on any machine
leaves = st.one_of(st.none(), st.integers(), st.text(max_size=3), tensors, st.just(UPDATE), st.just(len),
                  st.just(lambda theta, grad: None), st.just(object()))  # functions, objects: no state
values = st.recursive(leaves, lambda inner: st.one_of(
    st.tuples(inner, inner), st.tuples(inner), st.lists(inner, max_size=3),
    st.dictionaries(st.one_of(st.text(max_size=2), st.integers()), inner, max_size=2)), max_leaves=4)


def like_w(value: object) -> bool:
    return (isinstance(value, torch.Tensor) and value.shape == (5,) and value.dtype == torch.float32
            and value.device.type == "cpu")


def storable(value: object) -> bool:
    """What a checkpoint holds of a state, as docs/reference/parts.md writes it."""
    if value is None or isinstance(value, (bool, int, float, str, torch.Tensor, ClientUpdate)):
        return True
    if isinstance(value, (list, tuple)):
        return all(storable(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and not k.startswith("$") and storable(v) for k, v in value.items())
    return False


def fits(stage: str, value: object) -> bool:
    """The contract, as docs/parts.md writes each stage's return."""
    if stage in ("init_server", "init_client"):
        return storable(value)
    if stage == "local_term":
        return value is None or callable(value)
    if stage in ("start", "upload", "aggregate"):
        return like_w(value)
    if stage == "server_end":
        return isinstance(value, tuple) and len(value) == 2 and like_w(value[0]) and storable(value[1])
    if stage == "client_end":
        return (isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], dict)
                and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in value[1].items())
                and storable(value[0]))
    return isinstance(value, (list, tuple)) and all(isinstance(u, ClientUpdate) for u in value)


@settings(max_examples=300, deadline=None)
@given(stage=st.sampled_from(sorted(CHECKS)), value=st.one_of(
    tensors, st.tuples(tensors, leaves), st.tuples(leaves, st.dictionaries(st.one_of(st.text(max_size=2), st.integers()), st.one_of(tensors, leaves),
                                     max_size=2)),
    values))
def test_any_value_a_stage_returns_is_passed_on_as_it_is_or_refused_in_one_line(stage: str, value: object) -> None:
    part = Part(name="mine", **{stage: lambda *args: value})
    if stage != "aggregate":
        algorithm = guarded(compose("m", part, mean_aggregate()), "algorithm 'm' of m-pkg 1.0")
    else:
        algorithm = guarded(compose("m", part), "algorithm 'm' of m-pkg 1.0")
    checked = getattr(algorithm.parts[0], stage)
    if fits(stage, value):
        assert checked(*ARGS[stage]) is value
    else:
        with pytest.raises(StageFault) as caught:
            checked(*ARGS[stage])
        line = str(caught.value)
        assert line.startswith(f"algorithm 'm' of m-pkg 1.0: part 'mine''s {stage} returned ") and "\n" not in line
        if isinstance(value, tuple) and value and isinstance(value[0], torch.Tensor):  # (w_next, state): what came
            assert f"{value[0].dtype} tensor of shape {tuple(value[0].shape)}" in line  # back, not 'a tuple of 2'


def test_the_parts_a_plugin_reuses_from_fedaccel_are_not_wrapped() -> None:
    fedavg = build_algorithm("fedavg")
    mine = guarded(compose("m", Part(name="mine", upload=lambda ctx, d, ss: d), *fedavg.parts), "algorithm 'm'")
    assert mine.parts[1:] == fedavg.parts and mine.parts[0].upload is not None
    assert all(a is b for a, b in zip(mine.parts[1:], fedavg.parts))


HALF = '''
from fedaccel import Part, build_algorithm, compose


def myprox(*, mu: float = 0.01):
    return compose("myprox", Part(name="half", upload=lambda ctx, delta, ss: delta[: len(delta) // 2]),
                   *build_algorithm("fedavg").parts)
'''


@pytest.mark.parametrize("runtime", ["in-process", "stacked"])
def test_a_plugin_uploading_half_a_model_stops_its_run_in_one_line_naming_the_part(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, runtime: str) -> None:
    forget()
    monkeypatch.syspath_prepend(str(install(tmp_path / "site", source=HALF)))
    try:
        assert main(["run", "--set", "model=softmax", "--set", "data={dataset: digits, subset: 200, clients: 3}",
                     "--set", "train.rounds=2", "--set", "algorithm=myprox", "--set", f"run.runtime={runtime}",
                     "--set", "run.progress=false", "--out", str(tmp_path / "run")]) == 2
    finally:
        forget()
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: algorithm 'myprox' of fedaccel-myprox 0.1.0: part 'half''s upload returned a "
                              "torch.float32 tensor of shape (325,); it must return a tensor like the update it was "
                              "given: torch.float32, shape (650,)"), err


TENSOR_TERM = '''
from fedaccel import Part, build_algorithm, compose


def myprox(*, mu: float = 0.01):
    return compose("myprox", Part(name="term", local_term=lambda ctx, w, ss, cs: w * mu),
                   *build_algorithm("fedavg").parts)
'''
FUNCTION_STATE = '''
from fedaccel import Part, build_algorithm, compose


def myprox(*, mu: float = 0.01):
    return compose("myprox", Part(name="keeps", init_server=lambda w0: {"f": lambda x: x}),
                   *build_algorithm("fedavg").parts)
'''


@pytest.mark.parametrize(("source", "says"), [
    (TENSOR_TERM, "part 'term''s local_term returned a torch.float32 tensor of shape (650,); it must return None or "
                  "a function term(theta, grad)"),
    (FUNCTION_STATE, "part 'keeps''s init_server returned a dict a checkpoint cannot hold (cannot store a function)"),
], ids=["local-term-a-tensor", "state-a-function"])
def test_a_plugins_term_or_state_of_the_wrong_kind_stops_its_run_in_one_line_before_training(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, source: str, says: str) -> None:
    """A new user's local_term returning a tensor ended in torch's "'Tensor' object is not callable", and a state
    holding a function in "cannot store a function" after every round had trained, neither naming the part."""
    forget()
    monkeypatch.syspath_prepend(str(install(tmp_path / "site", source=source)))
    try:
        assert main(["run", "--set", "model=softmax", "--set", "data={dataset: digits, subset: 200, clients: 3}",
                     "--set", "train.rounds=2", "--set", "algorithm=myprox", "--set", "run.progress=false",
                     "--out", str(tmp_path / "run")]) == 2
    finally:
        forget()
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"error: algorithm 'myprox' of fedaccel-myprox 0.1.0: {says}"), err
    metrics = tmp_path / "run" / "metrics.jsonl"
    rows = metrics.read_text().splitlines() if metrics.is_file() else []
    assert len(rows) <= 1  # round 0 at most: stopped before the rounds' training, not after it
