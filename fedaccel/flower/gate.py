"""The server's gate: every part of a client's reply is checked before a round uses it.

A reply is read with bounds (:func:`read_reply`: the size of its records and of its JSON
skeleton, how deep that nests) and compared with what an honest client of the run's algorithm
sends (:func:`expected_reply`, learnt from the algorithm itself by running its client side for
a probe client, so it cannot drift from the parts): the delta and each extra by name, dtype and
shape, with finite values (:func:`check_upload`); a planning answer the same way
(:func:`check_plan`); diagnostics as a flat dict of plain values (:func:`check_diag`). A fault is
a reason to reject the client (``diag.rejected``, logged); the round goes on with the others.
Nothing a client sends makes these functions raise anything but :class:`BadMessage`.

Example:
    >>> expected = ReplyShape(Spec(torch.float32, (2,)), {"dc": Spec(torch.float32, (2,))})
    >>> check_upload({"delta": torch.zeros(2), "extras": {}, "diag": {}}, expected)
    "extras: 'dc' missing"
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from flwr.app import ArrayRecord, ConfigRecord, RecordDict
from torch import Tensor

from fedaccel.algorithms.base import ClientContext
from fedaccel.engine.round import round_info, train_client
from fedaccel.errors import shown
from fedaccel.flower.wire import ARRAYS, PACKED, BadMessage, packed_in, unpack
from fedaccel.runs.rows import client_value_fits

if TYPE_CHECKING:
    from fedaccel.runs.setup import Setup

MAX_JSON = 8 << 20  # characters of a reply's JSON skeleton (its tensors travel beside it)
MAX_ENTRIES = 256  # tensors in a reply's records (an honest one holds its delta and a few extras)
MAX_DIAG_KEYS = 64  # diagnostics of one client
MAX_DIAG_VALUES = 1_000_000  # values in one diagnostic list (BHerd's selected steps: one per local step)
MAX_TEXT = 200  # characters of a diagnostic's name or string value
MAX_INT = 2**63  # a diagnostic integer's magnitude (what JSON readers hold without loss)
PROBE_STEPS = 2  # local steps of the probe client that shows what an honest reply holds
UPLOAD_KEYS = frozenset({"delta", "extras", "diag"})


@dataclass(frozen=True)
class Spec:
    """A tensor's dtype and shape."""

    dtype: torch.dtype
    shape: tuple[int, ...]

    @classmethod
    def of(cls, tensor: Tensor) -> Spec:
        return cls(tensor.dtype, tuple(tensor.shape))


@dataclass(frozen=True)
class ReplyShape:
    """What an honest client of an algorithm sends: its delta, its extras by name and its
    planning answer by name (empty: none, or the algorithm plans nothing from statistics)."""

    delta: Spec
    extras: Mapping[str, Spec] = field(default_factory=dict)
    plan: Mapping[str, Spec] = field(default_factory=dict)


def expected_reply(setup: Setup) -> ReplyShape:
    """The reply shape of ``setup``'s algorithm: its client side run for :data:`PROBE_STEPS`
    local steps of the largest client in round 0, from fresh states (the run is not touched)."""
    federation, algorithm = setup.federation, setup.algorithm
    w = federation.model.theta.detach().clone()
    server, client_state = algorithm.init_server(w.clone()), algorithm.init_client(w.clone())
    client = max(range(federation.n_clients), key=lambda i: len(federation.partition[i]))
    ctx = ClientContext(round_info(federation, 0), client, PROBE_STEPS, True)
    plan: dict[str, Tensor] = {}
    planner = algorithm.single("plan_server")
    if planner is not None:
        k, part = planner
        plan = part.plan_client(ctx, w, server[k], client_state[k], federation.access(client))  # type: ignore[misc]
    _, update = train_client(algorithm, ctx, w, server, client_state, federation)
    return ReplyShape(Spec.of(update.delta), {name: Spec.of(t) for name, t in update.extras.items()},
                      {name: Spec.of(t) for name, t in plan.items()})


def read_reply(content: RecordDict, prefix: str, fallback: Callable[[RecordDict], Any] | None = None) -> Any:
    """The value a client packed under ``prefix`` (or, if it packed none, ``fallback(content)``),
    read within bounds. Raises only :class:`BadMessage`: whatever else reading a client's bytes
    raises is a reason to reject it, never the round's end."""
    try:
        if packed_in(content, prefix):
            _check_records(content, prefix)
            return unpack(content, prefix=prefix)
        if fallback is not None:
            return fallback(content)
        raise BadMessage(f"no {prefix}records")
    except BadMessage:
        raise
    except Exception as exc:  # a trust boundary: RecursionError, MemoryError, a foreign Array's dtype ...
        raise BadMessage(f"unreadable reply ({type(exc).__name__}: {exc})") from None


def _check_records(content: RecordDict, prefix: str) -> None:
    packed, arrays = content[prefix + PACKED], content.get(prefix + ARRAYS)
    if not isinstance(packed, ConfigRecord) or (arrays is not None and not isinstance(arrays, ArrayRecord)):
        raise BadMessage(f"{prefix}records of the wrong kind")
    tensors = len(packed) - 1 + (len(arrays) if arrays is not None else 0)  # all but the skeleton
    if tensors > MAX_ENTRIES:
        raise BadMessage(f"{tensors} tensors in a reply, at most {MAX_ENTRIES}")
    text = packed.get("json")
    if not isinstance(text, str) or len(text) > MAX_JSON:
        raise BadMessage(f"a JSON skeleton that is no string of at most {MAX_JSON} characters")


def check_upload(upload: Any, expected: ReplyShape) -> str | None:
    """Why an upload must not be aggregated, or None if it may: a dict of exactly ``delta``,
    ``extras`` and ``diag``, with the delta and the extras as ``expected`` says (finite) and plain
    diagnostics."""
    if type(upload) is not dict:
        return f"an upload is a dict, not a {type(upload).__name__}"
    if missing := UPLOAD_KEYS - upload.keys():
        return f"an upload without {_names(missing)}"
    if unexpected := upload.keys() - UPLOAD_KEYS:
        return f"an upload with unexpected {_names(unexpected)}"
    return (check_tensor("update", upload["delta"], expected.delta)
            or check_tensors("extras", upload["extras"], expected.extras)
            or check_diag(upload["diag"]))


def check_plan(plan: Any, expected: ReplyShape) -> str | None:
    """Why a planning answer must not be used, or None if it may."""
    return check_tensors("plan", plan, expected.plan)


def check_tensors(what: str, tensors: Any, expected: Mapping[str, Spec]) -> str | None:
    """Why ``tensors`` is not a dict of exactly the ``expected`` names, dtypes and shapes, finite."""
    if type(tensors) is not dict:
        return f"{what} are a {type(tensors).__name__}, not a dict of tensors"
    missing, unexpected = expected.keys() - tensors.keys(), tensors.keys() - expected.keys()
    if missing or unexpected:
        return f"{what}: {_names(missing)} missing" if missing else f"{what}: unexpected {_names(unexpected)}"
    for name, spec in expected.items():
        if fault := check_tensor(f"{what} {name!r}", tensors[name], spec):
            return fault
    return None


def check_tensor(name: str, value: Any, spec: Spec) -> str | None:
    """Why ``value`` is not a finite tensor of ``spec``'s dtype and shape, or None."""
    if type(value) is not Tensor or value.layout != torch.strided or value.device.type == "meta":
        return f"{name} is a {type(value).__name__}, not a dense tensor"
    if value.dtype != spec.dtype:
        return f"{name} is {_dtype(value.dtype)}, expected {_dtype(spec.dtype)}"
    if tuple(value.shape) != spec.shape:
        return f"{name} of shape {tuple(value.shape)}, expected {spec.shape}"
    if not all_finite(value):
        return f"non-finite values in {name}"
    return None


def upload_norm(upload: Mapping[str, Any]) -> float:
    """The Euclidean norm of an upload's delta and extras together (floating ones), in float64: a delta of 3e38
    per coordinate has a finite norm here, so it can be compared with a bound."""
    tensors = [upload["delta"], *upload["extras"].values()]
    return math.sqrt(sum(float(torch.linalg.vector_norm(t, dtype=torch.float64)) ** 2
                         for t in tensors if t.is_floating_point()))


def norm_faults(norms: Mapping[int, float], ratio: float | None, ceiling: float | None) -> dict[int, str]:
    """The clients whose upload norm is beyond the bound, with the reason: above ``ceiling``, or above ``ratio``
    times the median of the *other* uploads' norms this round (where that median is above 0). A client is
    measured against the others, not against a median that holds its own norm: with two clients, the median of
    both would rise with the hostile one's. One client's upload so cannot stop the run (its 3e38 made the
    aggregate overflow); poisoning within the bound is robust aggregation's job (``algorithm.aggregate``)."""
    faults: dict[int, str] = {}
    ordered = sorted(norms.values())
    for client, norm in norms.items():
        if ceiling is not None and norm > ceiling:
            faults[client] = f"update norm {norm:.3g} above run.norm_ceiling = {ceiling:g}"
        elif ratio is not None and len(ordered) > 1:
            median = _median_without(ordered, norm)
            if median > 0 and norm > ratio * median:
                faults[client] = (f"update norm {norm:.3g}, more than run.norm_ratio = {ratio:g} times the median "
                                  f"of the round's other uploads ({median:.3g})")
    return faults


def _median_without(ordered: list[float], value: float) -> float:
    """The median of the sorted ``ordered`` with one occurrence of ``value`` left out (in O(log n))."""
    k = bisect.bisect_left(ordered, value)

    def at(i: int) -> float:  # the i-th of the list without position k
        return ordered[i if i < k else i + 1]

    m = len(ordered) - 1
    return at(m // 2) if m % 2 else (at(m // 2 - 1) + at(m // 2)) / 2


def overflowing(tensors: Mapping[int, list[Tensor]], norms: Mapping[int, float]) -> list[int]:
    """The clients to leave out so that the sum of the other uploads' magnitudes is finite, tensor by tensor (so any
    weighted mean of them is, which is what the aggregators take), largest ``norms`` first; [] when it is already.
    The last guard, for bounds set off (null): no round's aggregate overflows because of one upload."""
    dropped: list[int] = []
    for client in sorted(tensors, key=lambda c: norms[c], reverse=True):
        kept = [parts for c, parts in tensors.items() if c not in dropped]
        if all(all_finite(sum(t.abs() for t in same)) for same in zip(*kept)):
            break
        dropped.append(client)
    return dropped


def all_finite(value: Tensor) -> bool:
    """Whether every element of ``value`` is finite. A finite sum proves it (a NaN or an infinity
    makes the sum NaN or infinite), at a sixth of the cost of ``isfinite(value).all()`` on a CPU
    (measured on a 2NN update); only a sum that is not finite (an element that is not, or finite
    values whose sum overflows) needs the element-wise check."""
    if value.is_floating_point() or value.is_complex():
        return bool(torch.isfinite(value.sum())) or bool(torch.isfinite(value).all())
    return True  # integers and booleans are finite


def check_diag(diag: Any) -> str | None:
    """Why a client's diagnostics cannot be recorded, or None: they must be a dict of at most
    :data:`MAX_DIAG_KEYS` short string names, each a plain value (None, a bool, an int, a float,
    finite or not, a short string) or a list of such, and what the run folder's readers take under
    that name (:func:`fedaccel.runs.rows.client_value_fits`: ``tau`` a step count, ``selected`` step
    indices, scores numbers): a reply the gate takes never leaves a folder they refuse."""
    if type(diag) is not dict:
        return f"diagnostics are a {type(diag).__name__}, not a dict"
    if len(diag) > MAX_DIAG_KEYS:
        return f"{len(diag)} diagnostics, at most {MAX_DIAG_KEYS}"
    for name, value in diag.items():
        if type(name) is not str or len(name) > MAX_TEXT:
            return f"a diagnostic named by a {type(name).__name__} that is no short string"
        values = value if type(value) is list else (value,)
        if len(values) > MAX_DIAG_VALUES:
            return f"diagnostic {name!r} holds {len(values)} values, at most {MAX_DIAG_VALUES}"
        if not all(map(_plain, values)):
            return f"diagnostic {name!r} holds what is no plain number or short string"
        if not client_value_fits(name, value):  # what fedaccel's readers refuse in a run folder
            return f"diagnostic {name!r} is {shown(value, 60)}, not what fedaccel records there"
    return None


def _plain(value: Any) -> bool:
    kind = type(value)
    return (value is None or kind is bool or kind is float or (kind is int and abs(value) < MAX_INT)
            or (kind is str and len(value) <= MAX_TEXT))


def _names(keys: Any) -> str:
    """A few of ``keys`` (of any kind), shown briefly."""
    shown = [repr(key)[:40] for key in itertools.islice(keys, 3)]
    return ", ".join(shown) + (" ..." if len(keys) > 3 else "") if shown else "nothing"


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
