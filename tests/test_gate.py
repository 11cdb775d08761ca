"""No client can crash a round (issue 29, item 3): the server's gate checks every part of every reply.

Generated hostile replies (Hypothesis) are thrown at the gate for every algorithm's reply shape; each is
rejected with a reason and nothing else is raised. A round run through the server's code path
(:class:`~fedaccel.flower.server.FlowerClients` over an in-process grid that calls the fedaccel
ClientApp's handlers) with one hostile client among honest ones completes with the others, the
hostile one counted in ``diag.rejected``, and gives what the in-process round without it gives.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("flwr")

from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict  # noqa: E402

from fedaccel.algorithms.base import ClientContext  # noqa: E402
from fedaccel.algorithms.registry import RECIPES  # noqa: E402
from fedaccel.engine.round import InProcessClients, init_state, round_info, run_round, train_client  # noqa: E402
from fedaccel.flower import client as fedaccel_client  # noqa: E402
from fedaccel.flower.gate import (  # noqa: E402
    MAX_DIAG_KEYS,
    MAX_INT,
    MAX_TEXT,
    ReplyShape,
    Spec,
    all_finite,
    check_diag,
    check_plan,
    check_upload,
    expected_reply,
    norm_faults,
    overflowing,
    read_reply,
)
from fedaccel.flower.server import REASON_LIMIT, FlowerClients, one_line  # noqa: E402
from fedaccel.flower.wire import MAX_DEPTH, BadMessage, pack, unpack  # noqa: E402
from fedaccel.nesting import could_nest_deeper, nesting_depth  # noqa: E402
from fedaccel.runs.config import load_config  # noqa: E402
from fedaccel.runs.setup import Setup, build_setup  # noqa: E402

TINY = ["data.dataset=digits", "model=softmax", "data.clients=3", "data.split=dirichlet", "data.split.alpha=0.5",
        "train.rounds=2", "train.lr=0.1", "train.batch_size=50", "run.progress=false"]
UPDATE, PLAN = fedaccel_client.UPDATE, fedaccel_client.PLAN


@functools.cache
def setup_of(algorithm: str) -> Setup:
    return build_setup(load_config(None, [*TINY, f"algorithm={algorithm}"]))


@functools.cache
def shape_of(algorithm: str) -> ReplyShape:
    return expected_reply(setup_of(algorithm))


ALGORITHMS = sorted(RECIPES)


# ============================================================================================
# The reply shape comes from the algorithm itself, and honest replies pass
# ============================================================================================


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_an_honest_reply_of_every_algorithm_passes_the_gate_as_it_comes_off_the_wire(algorithm: str) -> None:
    """A real client's reply (another client than the probe's, its real local steps, the second
    round) has the shape the probe found: the gate never rejects an honest client."""
    setup = setup_of(algorithm)
    federation, alg = setup.federation, setup.algorithm
    state = init_state(alg, federation.model.theta, federation.n_clients)
    state, _ = run_round(alg, state, federation, fraction=1.0)  # the states of a round in
    client = min(range(federation.n_clients), key=lambda i: len(federation.partition[i]))
    ctx = ClientContext(round_info(federation, 1), client, int(federation.steps[client]), True)
    expected = shape_of(algorithm)
    planner = alg.single("plan_server")
    if planner is not None:
        k, part = planner
        plan = part.plan_client(ctx, state.w, state.server[k], state.clients[client][k], federation.access(client))
        assert check_plan(read_reply(pack(plan, prefix=PLAN), PLAN), expected) is None
    _, update = train_client(alg, ctx, state.w, state.server, state.clients[client], federation)
    sent = pack({"delta": update.delta, "extras": update.extras, "diag": update.diag}, prefix=UPDATE)
    assert check_upload(read_reply(sent, UPDATE), expected) is None
    assert set(expected.extras) == set(update.extras)


def test_the_gate_s_reasons_name_what_is_wrong() -> None:
    expected = shape_of("scaffold")
    good = {"delta": torch.zeros(650), "extras": {"dc": torch.zeros(650)}, "diag": {"tau": 3}}
    assert check_upload(good, expected) is None
    assert check_upload({**good, "delta": torch.zeros(650, dtype=torch.float64)}, expected) == \
        "update is float64, expected float32"
    assert check_upload({**good, "extras": {"dc": torch.zeros(3)}}, expected) == \
        "extras 'dc' of shape (3,), expected (650,)"
    assert check_upload({**good, "extras": {}}, expected) == "extras: 'dc' missing"
    assert check_upload({**good, "diag": {"x": torch.zeros(2)}}, expected) == \
        "diagnostic 'x' holds what is no plain number or short string"
    inf = torch.zeros(650)
    inf[7] = math.inf
    assert check_upload({**good, "extras": {"dc": inf}}, expected) == "non-finite values in extras 'dc'"
    assert check_upload({k: v for k, v in good.items() if k != "diag"}, expected) == "an upload without 'diag'"
    deep = pack(good, prefix=UPDATE)
    deep[UPDATE + "packed"]["json"] = "[" * 100_000 + "]" * 100_000
    with pytest.raises(BadMessage, match=f"nested 100000 deep, at most {MAX_DEPTH}"):
        read_reply(deep, UPDATE)


# ============================================================================================
# Generated hostile replies, for every algorithm's reply shape
# ============================================================================================

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int8,
          torch.uint8, torch.bool, torch.complex64]


@dataclasses.dataclass
class Opaque:
    """A Python object no JSON holds."""

    x: int = 1


@functools.cache
def junk() -> st.SearchStrategy[Any]:
    """Values that are no tensor and no plain diagnostic: containers, bytes, objects, deep nesting."""
    deep = st.integers(1, 3000).map(lambda n: functools.reduce(lambda v, _: [v], range(n), 0))
    return st.one_of(
        st.none(), st.integers(), st.floats(), st.text(max_size=20), st.binary(max_size=20),
        st.lists(st.integers(), max_size=5), st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
        st.builds(Opaque), st.just(Opaque), st.complex_numbers(), st.frozensets(st.integers(), max_size=3),
        st.tuples(st.integers()), deep, st.builds(lambda n: torch.zeros(n).numpy(), st.integers(0, 4)),
    )


@functools.cache
def bad_diagnostic() -> st.SearchStrategy[Any]:
    """A diagnostic value the gate must refuse."""
    plain_list = st.lists(st.integers(-5, 5), max_size=3)
    return st.one_of(
        st.builds(torch.zeros, st.integers(0, 3)),  # a tensor
        st.builds(lambda v: [v], st.builds(torch.zeros, st.integers(0, 3))),
        st.builds(lambda v: {"x": v}, st.integers()), st.builds(lambda v: [v], plain_list),  # nested
        st.integers(min_value=MAX_INT) | st.integers(max_value=-MAX_INT),  # beyond what readers hold
        st.integers(MAX_TEXT + 1, 100_000).map(lambda n: "x" * n),  # a long string
        st.builds(Opaque), st.binary(max_size=3), st.complex_numbers(), st.tuples(st.integers()),
        junk().filter(lambda v: not (v is None or type(v) in (int, float, str)
                                     or (type(v) is list and all(type(x) is int for x in v)))),
    )


@functools.cache
def bad_tensor(spec: Spec) -> st.SearchStrategy[Any]:
    """Something in place of a tensor of ``spec``: another dtype, another shape, NaN or inf, no tensor."""
    other_dtypes = [d for d in DTYPES if d != spec.dtype]
    other_dtype = st.sampled_from(other_dtypes).map(lambda d: torch.zeros(spec.shape, dtype=d))
    other_shape = st.lists(st.integers(0, 700), max_size=3).filter(lambda s: tuple(s) != spec.shape).map(
        lambda s: torch.zeros(s, dtype=spec.dtype))

    def non_finite(args: tuple[int, float]) -> Any:
        tensor = torch.zeros(spec.shape, dtype=spec.dtype)
        tensor.view(-1)[args[0] % tensor.numel()] = args[1]
        return tensor

    nan_or_inf = st.tuples(st.integers(0, 10**6), st.sampled_from([math.nan, math.inf, -math.inf])).map(non_finite)
    return st.one_of(other_dtype, other_shape, nan_or_inf, junk(), st.just(torch.zeros(spec.shape, device="meta")),
                     st.just(torch.zeros(spec.shape, dtype=spec.dtype).to_sparse()))


@functools.cache
def key() -> st.SearchStrategy[Any]:
    return st.one_of(st.text(max_size=8), st.integers(), st.none(), st.tuples(st.integers()),
                     st.floats(allow_nan=False))


@st.composite
def hostile_upload(draw: st.DrawFn, expected: ReplyShape) -> Any:
    """An honest upload of ``expected``'s shape with one fault, or junk in its place."""
    upload: dict[Any, Any] = {"delta": torch.randn(expected.delta.shape).to(expected.delta.dtype),
                              "extras": {name: torch.randn(s.shape).to(s.dtype) for name, s in expected.extras.items()},
                              "diag": {"tau": 3, "selected": [0, 2], "distance": math.nan, "estimate_error": None}}
    fault = draw(st.sampled_from(["junk", "drop", "add", "delta", "extras", "drop extra", "add extra", "bad extra",
                                  "diag", "bad diagnostic", "diagnostic name", "many diagnostics"]))
    if fault == "junk":
        return draw(junk())
    if fault == "drop":
        del upload[draw(st.sampled_from(sorted(upload)))]
    elif fault == "add":
        upload[draw(key().filter(lambda k: k not in upload))] = draw(junk())
    elif fault == "delta":
        upload["delta"] = draw(bad_tensor(expected.delta))
    elif fault == "extras":
        upload["extras"] = draw(junk().filter(lambda v: not (type(v) is dict and not expected.extras and not v)))
    elif fault == "drop extra" and expected.extras:
        del upload["extras"][draw(st.sampled_from(sorted(expected.extras)))]
    elif fault in ("add extra", "drop extra"):
        upload["extras"][draw(key().filter(lambda k: k not in expected.extras))] = torch.zeros(expected.delta.shape)
    elif fault == "bad extra" and expected.extras:
        name = draw(st.sampled_from(sorted(expected.extras)))
        upload["extras"][name] = draw(bad_tensor(expected.extras[name]))
    elif fault in ("bad extra", "diag"):
        upload["diag"] = draw(junk().filter(lambda v: type(v) is not dict))
    elif fault == "bad diagnostic":
        upload["diag"][draw(st.text(max_size=8))] = draw(bad_diagnostic())
    elif fault == "diagnostic name":
        upload["diag"][draw(key().filter(lambda k: type(k) is not str) | st.just("n" * (MAX_TEXT + 1)))] = 1.0
    else:
        upload["diag"].update({f"d{k}": k for k in range(MAX_DIAG_KEYS + 1)})
    return upload


@st.composite
def algorithm_and_upload(draw: st.DrawFn) -> tuple[str, Any]:
    algorithm = draw(st.sampled_from(ALGORITHMS))
    return algorithm, draw(hostile_upload(shape_of(algorithm)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(algorithm_and_upload())
def test_every_generated_hostile_upload_is_rejected_with_a_reason(case: tuple[str, Any]) -> None:
    algorithm, upload = case
    reason = check_upload(upload, shape_of(algorithm))
    assert isinstance(reason, str) and reason


@st.composite
def hostile_plan(draw: st.DrawFn) -> tuple[str, Any]:
    algorithm = draw(st.sampled_from([a for a in ALGORITHMS if shape_of(a).plan]))
    expected = shape_of(algorithm).plan
    plan: dict[Any, Any] = {name: torch.zeros(s.shape, dtype=s.dtype) for name, s in expected.items()}
    fault = draw(st.sampled_from(["junk", "drop", "add", "bad"]))
    name = draw(st.sampled_from(sorted(expected)))
    if fault == "junk":
        return algorithm, draw(junk())
    if fault == "drop":
        del plan[name]
    elif fault == "add":
        plan[draw(key().filter(lambda k: k not in expected))] = torch.zeros(1)
    else:
        plan[name] = draw(bad_tensor(expected[name]))
    return algorithm, plan


@settings(max_examples=150, deadline=None)
@given(hostile_plan())
def test_every_generated_hostile_plan_is_rejected_with_a_reason(case: tuple[str, Any]) -> None:
    algorithm, plan = case
    reason = check_plan(plan, shape_of(algorithm))
    assert isinstance(reason, str) and reason


@functools.cache
def plain_json() -> st.SearchStrategy[Any]:
    """JSON values whose strings are full of brackets, quotes and backslashes."""
    text = st.text(alphabet='[]{}"\\ab\u00e9\u2603', max_size=6)
    return st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | text,
                        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
                        max_leaves=20)


def depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    return 0


@given(plain_json())
def test_nesting_depth_reads_json_as_a_parser_would(value: Any) -> None:
    assert nesting_depth(json.dumps(value)) == depth(value)
    assert nesting_depth(json.dumps(value, ensure_ascii=False)) == depth(value)


@given(plain_json())
def test_a_text_with_few_brackets_is_not_counted_and_one_that_nests_deeper_always_is(value: Any) -> None:
    text = json.dumps(value)
    for limit in (0, 1, 2, 5):
        assert could_nest_deeper(text, limit) or depth(value) <= limit  # skipped only where it cannot be deeper


SPECIAL = st.sampled_from([math.nan, math.inf, -math.inf, 3.0e38, -3.0e38, 6.0e4, 1e-45, 0.0, -0.0])


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False, width=32) | SPECIAL, max_size=300),
       st.sampled_from([torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex64]))
def test_all_finite_agrees_with_the_element_wise_check(values: list[float], dtype: torch.dtype) -> None:
    """Whatever the values, overflowing sums included (3e38 twice in float32, 6e4 in float16)."""
    tensor = torch.tensor(values, dtype=torch.float64).to(dtype)
    assert all_finite(tensor) == bool(torch.isfinite(tensor).all())
    assert all_finite(tensor.reshape(-1, 1)[::2]) == bool(torch.isfinite(tensor[::2]).all())  # strided
    assert all_finite(torch.tensor([len(values), -7], dtype=torch.int64)) and all_finite(tensor != 0)  # ints, bools


@functools.cache
def tensor_node() -> st.SearchStrategy[str]:
    """An upload whose delta is a tensor node of any dtype and shape (its bytes: the record's "0")."""
    dtype = st.sampled_from(["float32", "float64", "object", "complex64", "<f4", ">f8", "bool", "V8", "float"])
    shape = st.lists(st.integers(-2, 10**12), max_size=3) | plain_json()
    return st.builds(lambda d, s: json.dumps({"delta": {"$t": "0", "dtype": d, "shape": s}, "extras": {}, "diag": {}}),
                     dtype, shape)


@functools.cache
def state_class_node() -> st.SearchStrategy[str]:
    """A skeleton naming a state class to build: outside fedaccel.algorithms, no class, no dataclass, odd fields."""
    names = st.sampled_from(["os:system", "fedaccel.algorithms.base:Part", "fedaccel.algorithms..x:Y", ".x:Y",
                             "fedaccel.algorithms.registry:RECIPES", "fedaccel.algorithms.fedumf:FedUMFClient",
                             "fedaccel.algorithms.nothing:X", "fedaccel.algorithms.base:ClientUpdate"])
    return st.builds(lambda name, fields: json.dumps({"$dc": name, **fields}), names | st.text(max_size=20),
                     st.dictionaries(st.text(max_size=8), plain_json(), max_size=3))


@functools.cache
def flower_array() -> st.SearchStrategy[Array]:
    """A Flower Array as a hostile client may send one: garbage bytes, pickled objects, strings, dates."""
    return st.one_of(
        st.builds(lambda dtype, data: Array(dtype=dtype, shape=(1,), stype="numpy.ndarray", data=data),
                  st.sampled_from(["object", "float32", "<U3"]), st.binary(max_size=64)),
        st.builds(lambda kind: Array(np.zeros(3, dtype=kind)),
                  st.sampled_from(["complex64", "<U2", "float64", "M8[s]"])),
        st.just(Array(dtype="float32", shape=(1,), stype="other", data=b"1234")),
    )


def nested(n: int) -> st.SearchStrategy[str]:
    return st.sampled_from(["[" * n + "]" * n, '{"a":' * n + "1" + "}" * n, "[" * n])


SKELETONS = {
    "deep": st.integers(MAX_DEPTH - 2, 120_000).flatmap(nested),
    "json": plain_json().map(json.dumps) | st.text(max_size=50),
    "tensor": tensor_node(), "state class": state_class_node(),
    "array": st.sampled_from(['{"delta": {"$a": "0"}}', '{"delta": {"$a": ["0"]}}', '{"$a": "1"}']),
    **dict.fromkeys(["many", "no json", "none"], st.just("{}")),
}


@st.composite
def hostile_records(draw: st.DrawFn) -> RecordDict:
    """A reply's records as a hostile client may shape them: deep nesting, any JSON skeleton, tensor nodes
    with any dtype, shape and bytes, state classes by any name, foreign Flower Arrays, many records, none."""
    kind = draw(st.sampled_from(sorted(SKELETONS)))
    skeleton = draw(SKELETONS[kind])
    fields: dict[str, Any] = {"json": skeleton if kind != "no json" else draw(st.integers() | st.binary())}
    fields["0"] = draw(st.binary(max_size=16))
    if kind == "many":
        fields.update(dict.fromkeys(map(str, range(1, 300)), b"\x00"))
    records = RecordDict({UPDATE + "packed": ConfigRecord(fields)})
    if kind == "array":
        records[UPDATE + "arrays"] = ArrayRecord({"0": draw(flower_array())})
    return records if kind != "none" else RecordDict({"other": ConfigRecord(fields)})


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(hostile_records(), st.sampled_from(ALGORITHMS))
def test_hostile_records_are_read_or_refused_and_never_raise_anything_else(records: RecordDict, algorithm: str) -> None:
    try:
        upload = read_reply(records, UPDATE)
    except BadMessage as exc:
        assert str(exc)
        return
    assert isinstance(check_upload(upload, shape_of(algorithm)), str)  # nothing generated here is an honest upload


@given(st.text(max_size=2000))
def test_a_rejection_s_reason_is_one_short_printable_line_whatever_the_client_wrote(text: str) -> None:
    line = one_line(f"client error: {text}\nfedaccel server: round 9/9  test_acc 1.0000  (0.1 s)")
    assert line.isprintable() and len(line) <= REASON_LIMIT and line.startswith("client error: ")


def test_diagnostics_that_are_plain_pass_and_tensors_do_not() -> None:
    assert check_diag({"tau": 3, "selected": [0, 1], "distance": math.inf, "estimate_error": None, "x": "ok"}) is None
    assert "plain" in check_diag({"gap": torch.tensor(1.0)})


# ============================================================================================
# A round through the server's code path, with one hostile client among honest ones
# ============================================================================================


class LoopbackGrid:
    """A Flower grid whose nodes are the fedaccel ClientApp's handlers, called in this process
    when the server pulls; node k is client k, and ``hostile`` rewrites client 1's replies."""

    HANDLERS: dict[str, Callable[[Message, Context], Message]] = {
        "query.hello": fedaccel_client.hello, "train.plan": fedaccel_client.plan, "train": fedaccel_client.train}

    def __init__(self, n: int, hostile: Callable[[str, RecordDict], None]) -> None:
        self.contexts = [Context(0, k, {"partition-id": k}, RecordDict(), {}) for k in range(n)]
        self.hostile, self.pending, self.count = hostile, {}, 0

    def push_messages(self, messages: list[Message]) -> list[str]:
        ids = []
        for message in messages:
            self.count += 1
            message.metadata.__dict__["_message_id"] = f"m{self.count}"
            self.pending[f"m{self.count}"] = message
            ids.append(f"m{self.count}")
        return ids

    def pull_messages(self, ids: set[str]) -> list[Message]:
        replies = []
        for message_id in sorted(ids & set(self.pending)):
            message = self.pending.pop(message_id)
            node = message.metadata.dst_node_id
            reply = self.HANDLERS[message.metadata.message_type](message, self.contexts[node])
            if node == 1:
                self.hostile(message.metadata.message_type, reply.content)
            replies.append(reply)
        return replies


def rewrite(change: Callable[[dict[str, Any]], None]) -> Callable[[str, RecordDict], None]:
    """A hostile client that changes what it packed, in the messages of its phase."""

    def hostile(prefix: str, content: RecordDict) -> None:
        value = unpack(content, prefix=prefix)
        change(value)
        pack(value, into=content, prefix=prefix)

    return hostile


def deep_json(prefix: str, content: RecordDict) -> None:
    content[prefix + "packed"]["json"] = "[" * 100_000 + "]" * 100_000


HOSTILE: dict[str, tuple[str, str, Callable[[str, RecordDict], None], str]] = {
    # the issue's cases: (algorithm, the phase, the hostile client, what its rejection says)
    "json nested 100,000 deep": ("scaffold", "train", deep_json, "nested 100000 deep"),
    "SCAFFOLD extras of shape (3,)": ("scaffold", "train", rewrite(lambda u: u["extras"].update(dc=torch.zeros(3))),
                                      "extras 'dc' of shape (3,), expected (650,)"),
    "extras missing": ("scaffold", "train", rewrite(lambda u: u["extras"].clear()), "'dc' missing"),
    "a tensor in its diagnostics": ("bherd", "train", rewrite(lambda u: u["diag"].update(gap=torch.ones(2))),
                                    "diagnostic 'gap'"),
    "a float64 delta": ("feddc", "train", rewrite(lambda u: u.update(delta=u["delta"].double())),
                        "update is float64, expected float32"),
    "a plan of the wrong shape": ("fedgsnr-scaffold", "train.plan", rewrite(lambda p: p.update(var=torch.zeros(3))),
                                  "plan 'var' of shape (3,)"),
    # issue 47, item 7: finite, of the right shape and dtype, and beyond the norm bound (3e38 ended the run)
    "a delta of 3e38 per coordinate": ("fedavg", "train", rewrite(lambda u: u["delta"].fill_(3e38)),
                                       "above run.norm_ceiling = 1e+06"),
    "a delta of 1e30 per coordinate": ("fednova", "train", rewrite(lambda u: u["delta"].fill_(1e30)),
                                       "above run.norm_ceiling"),
    "SCAFFOLD extras of 3e38": ("scaffold", "train", rewrite(lambda u: u["extras"]["dc"].fill_(3e38)),
                                "above run.norm_ceiling"),
    "a delta 1000 times the others' (no ceiling)": (
        "fedavg", "train", rewrite(lambda u: u["delta"].mul_(1000)), "more than run.norm_ratio = 100 times the median"),
}
SETTINGS = {"a delta 1000 times the others' (no ceiling)": ["run.norm_ceiling=null"]}


class WithoutClient(InProcessClients):
    """The in-process clients, with client 1's answer in ``phase`` dropped (as if rejected)."""

    phase = "train"

    def plan(self, contexts: Any, w: torch.Tensor, server: Any) -> Any:
        plans, diag = super().plan(contexts, w, server)
        return {c: p for c, p in plans.items() if c != 1 or self.phase != "train.plan"}, diag

    def train(self, contexts: Any, w: torch.Tensor, server: Any) -> Any:
        updates, diag = super().train(contexts, w, server)
        return [u for u in updates if u.client != 1 or self.phase != "train"], diag


def tensors_in(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from tensors_in(item)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from tensors_in(getattr(value, f.name))


def flower_round(setup: Setup, grid: LoopbackGrid, start: Any) -> Any:
    """Round 1 of ``setup`` from ``start`` through the server's code path over ``grid``: (state, report)."""
    import yaml

    text = yaml.safe_dump(setup.config.to_dict(), sort_keys=True)
    for node, context in enumerate(grid.contexts):  # the hello a deployment sends first
        hello = Message(RecordDict({"config": ConfigRecord({"yaml": text, "round": 0})}), node, "query.hello")
        grid.push_messages([hello])
        fedaccel_client.hello(hello, context)
    federation = setup.federation
    runtime = FlowerClients(grid, setup, {k: k for k in range(federation.n_clients)}, timeout=60.0)  # type: ignore[arg-type]
    return run_round(setup.algorithm, start, federation, fraction=1.0, runtime=runtime)


class Repeating(LoopbackGrid):
    """Client 1's reply delivered 8 times in one pull (a SuperLink or a client replaying it)."""

    def pull_messages(self, ids: set[str]) -> list[Message]:
        replies = super().pull_messages(ids)
        return [copy for reply in replies for copy in ([reply] * 8 if reply.metadata.src_node_id == 1 else [reply])]


def test_a_reply_delivered_eight_times_counts_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from flwr.supercore.task_identity import TaskIdentity

    for name in ("_run_id", "_task_id", "_node_id"):
        monkeypatch.setattr(TaskIdentity, name, 1)
    setup = build_setup(load_config(None, [*TINY, "algorithm=fedavg"]))
    federation = setup.federation
    start = init_state(setup.algorithm, federation.model.theta, federation.n_clients)
    state, report = flower_round(setup, Repeating(federation.n_clients, lambda kind, content: None), start)
    expected, _ = run_round(setup.algorithm, start, federation, fraction=1.0,
                            runtime=InProcessClients(setup.algorithm, federation, start.clients))
    assert report.uploaded == federation.n_clients and "rejected" not in report.diag
    torch.testing.assert_close(state.w, expected.w, atol=1e-6, rtol=0)


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_round_with_one_hostile_client_completes_with_the_others(
    case: str, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flwr.supercore.task_identity import TaskIdentity

    for name in ("_run_id", "_task_id", "_node_id"):  # what a ServerApp process has
        monkeypatch.setattr(TaskIdentity, name, 1)

    algorithm, phase, hostile, says = HOSTILE[case]
    setup = build_setup(load_config(None, [*TINY, f"algorithm={algorithm}", *SETTINGS.get(case, [])]))
    federation, alg = setup.federation, setup.algorithm
    prefix = PLAN if phase == "train.plan" else UPDATE
    grid = LoopbackGrid(federation.n_clients, lambda kind, content: hostile(prefix, content) if kind == phase else None)
    start = init_state(alg, federation.model.theta, federation.n_clients)
    state, report = flower_round(setup, grid, start)

    assert report.diag["rejected"].keys() == {"1"} and says in report.diag["rejected"]["1"]
    assert f"rejected the answer of client 1: {report.diag['rejected']['1']}" in capsys.readouterr().err
    reference = WithoutClient(alg, federation, start.clients)
    reference.phase = phase
    expected_state, expected_report = run_round(alg, start, federation, fraction=1.0, runtime=reference)
    # a rejected update is not aggregated; a client whose plan was rejected is not planned and does not train
    assert report.uploaded == expected_report.uploaded == federation.n_clients - 1
    assert report.diag.get("unplanned") == ([1] if phase == "train.plan" else None)
    torch.testing.assert_close(state.w, expected_state.w, atol=1e-6, rtol=0)
    for got, want in zip(tensors_in(state.server), tensors_in(expected_state.server), strict=True):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=0)
    json.dumps(report.diag)  # what the run writes: plain JSON


def _diag_value() -> st.SearchStrategy[Any]:
    """What a client may put under a diagnostic name: plain values and lists of them, near the readers' limits."""
    plain = st.one_of(st.none(), st.booleans(), st.integers(-MAX_INT, MAX_INT), st.integers(-3, 12),
                      st.floats(allow_nan=True), st.text(max_size=MAX_TEXT + 1))
    return st.one_of(plain, st.lists(plain, max_size=5), st.lists(st.integers(-2, 10_000_001), max_size=5))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["tau", "selected", "distance", "gsnr", "n", "steps", "alpha", "x"]),
                       _diag_value(), max_size=4))
def test_what_the_gate_takes_every_reader_takes(diag: dict[str, Any]) -> None:
    """Issue 47, item 1: diagnostics the gate takes are written as the run writes them and read back by the
    readers' check without a refusal; diagnostics the readers refuse were rejected by the gate."""
    from fedaccel.errors import UserError
    from fedaccel.runs.loop import _write
    from fedaccel.runs.rows import read_diagnostics_rows

    with tempfile.TemporaryDirectory() as folder:
        file = Path(folder) / "diagnostics.jsonl"
        with open(file, "w", encoding="utf-8") as out:
            _write(out, {"round": 1, "clients": {"0": diag}})
        try:
            read_diagnostics_rows(file, last_round=2)
            read = True
        except UserError:
            read = False
    assert read or check_diag(diag) is not None  # the gate takes => the readers take; they refuse => it rejected


@pytest.mark.parametrize("diag", [{"tau": "x"}, {"selected": [-1]}, {"distance": "far"}, {"tau": 2**63 - 1},
                                  {"selected": [0, True]}, {"gsnr": [1.0]}])
def test_the_issue_s_diagnostics_that_readers_refuse_are_rejected_by_the_gate(diag: dict[str, Any]) -> None:
    assert "not what fedaccel records there" in check_diag(diag)


@settings(max_examples=200, deadline=None)
@given(norms=st.dictionaries(st.integers(0, 20), st.floats(0, 1e40) | st.sampled_from([0.0, 1.0]), max_size=8),
       ratio=st.none() | st.floats(1, 1000), ceiling=st.none() | st.floats(1e-3, 1e39))
def test_a_norm_is_out_of_bounds_exactly_when_the_plain_definition_says(
        norms: dict[int, float], ratio: float | None, ceiling: float | None) -> None:
    """norm_faults against the definition computed the slow way: above the ceiling, or above ratio times the
    median of the others' norms (statistics.median of the list without the client), where that median is > 0."""
    import statistics

    faults = norm_faults(norms, ratio, ceiling)
    for client, norm in norms.items():
        others = [n for c, n in norms.items() if c != client]
        median = statistics.median(others) if others else 0.0
        out = (ceiling is not None and norm > ceiling) or (ratio is not None and median > 0 and norm > ratio * median)
        assert (client in faults) == out, (client, norm, median, faults.get(client))


def test_an_aggregate_that_would_overflow_drops_the_largest_uploads_until_it_is_finite() -> None:
    """Bounds set off (null): two uploads of 3e38 sum to infinity in float32; the largest is left out, and the rest
    (whose magnitudes sum finitely, so any weighted mean of them is finite) is aggregated."""
    honest = [torch.full((4,), 0.5)]
    uploads = {0: honest, 1: [torch.full((4,), 3e38)], 2: [torch.full((4,), 3.1e38)]}
    norms = {client: float(torch.linalg.vector_norm(parts[0], dtype=torch.float64)) for client, parts in uploads.items()}
    assert overflowing(uploads, norms) == [2]
    assert overflowing({0: honest, 1: [torch.full((4,), 3e38)]}, norms) == []
    assert overflowing({}, {}) == []
