"""A paper's claims as data, judged by one statistical rule on paired seeds.

A :class:`Claim` is a row: the experiment, the two setups compared (``a`` and ``b``, config values
by dotted key), a :class:`Measure` of each run, the direction the paper states and the paper's own
number. :func:`judge` pairs the runs of ``a`` and ``b`` by seed, takes the per-seed differences
``d_s = m(a_s) - m(b_s)`` and a paired bootstrap of their mean (10,000 resamples, percentile 95%
interval, fixed resampling seed so a report is reproducible). The verdict:

- ``expect="less"`` (a's measure is lower: fewer rounds, lower loss): **agrees** when the whole
  interval lies below ``-margin``, **disagrees** when it lies above it, else **inconclusive**;
- ``expect="greater"``: the mirror image (above ``margin`` agrees, below it disagrees);
- ``expect="equal"``: **agrees** when the interval lies within ``[-margin, margin]``, **disagrees**
  when it lies wholly outside it, else **inconclusive**.

A claim without ``b`` compares ``a``'s per-seed values with the constant ``value``.

Rounds to a target are censored, never dropped: a run that does not reach the target counts as
its last round plus one evaluation interval (a lower bound), and the report says how many did not.
A value of :data:`BEST` in ``a`` or ``b`` (``{"train.lr": BEST}``) picks, among the runs that match
the rest, the value whose runs have the lowest training loss averaged over rounds and seeds: the
learning rate is tuned on the training loss, never on the test set.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedaccel.report.reading import Run, value_at

BEST = "best"  # in a claim's setup: the value of this key with the lowest mean training loss
RESAMPLES = 10_000
LEVEL = 0.95
METHOD = (f"paired bootstrap over seeds of the mean per-seed difference a - b ({RESAMPLES:,} resamples, "
          f"{LEVEL:.0%} percentile interval)")
EXPECTATIONS = ("less", "greater", "equal")


@dataclass(frozen=True)
class Measure:
    """A number per run: ``of(run)``, described by ``name`` (e.g. "rounds to 0.93 test accuracy")."""

    name: str
    of: Callable[[Run], float]
    fmt: str = ".4g"
    target: float | None = None  # for rounds-to-target measures: the accuracy aimed at
    metric: str = "test_acc"


def _curve(run: Run, metric: str) -> tuple[np.ndarray, np.ndarray]:
    rows = [(r["round"], r[metric]) for r in run.metrics if r.get(metric) is not None and r["round"] > 0]
    if not rows:
        raise ValueError(f"{run.path}: no {metric} recorded after round 0")
    x, y = np.array(rows, dtype=float).T
    return x, y


def last_round(run: Run) -> int:
    return max(int(r["round"]) for r in run.metrics)


def eval_interval(run: Run) -> int:
    rounds = sorted({int(r["round"]) for r in run.metrics})
    return int(min(np.diff(rounds))) if len(rounds) > 1 else 1


def reached(run: Run, target: float, metric: str = "test_acc") -> bool:
    x, y = _curve(run, metric)
    return bool(np.any(y <= target if "loss" in metric else y >= target))


def rounds_to(target: float, metric: str = "test_acc") -> Measure:
    """Rounds until ``metric`` first reaches ``target`` (``<=`` for a loss), censored at the last
    round plus one evaluation interval."""

    def of(run: Run) -> float:
        x, y = _curve(run, metric)
        hit = np.flatnonzero(y <= target if "loss" in metric else y >= target)
        return float(x[hit[0]]) if hit.size else float(last_round(run) + eval_interval(run))

    word = metric.replace("_", " ").replace("acc", "accuracy")
    return Measure(f"rounds to {target:g} {word}", of, ".3g", target=target, metric=metric)


def mean_over_rounds(metric: str = "train_loss", *, upto: float = 1.0) -> Measure:
    """``metric`` averaged over the evaluated rounds after round 0 (up to the fraction ``upto`` of the
    run): the area under the curve per round, a continuous counterpart of rounds-to-target."""

    def of(run: Run) -> float:
        x, y = _curve(run, metric)
        return float(np.mean(y[x <= upto * last_round(run)]))

    part = "" if upto == 1.0 else f" (first {upto:.0%} of rounds)"
    return Measure(f"mean {metric.replace('_', ' ')} over rounds{part}", of, ".4g", metric=metric)


def final(metric: str = "test_acc", last: int = 3) -> Measure:
    """``metric`` averaged over the last ``last`` evaluations."""

    def of(run: Run) -> float:
        return float(np.mean(_curve(run, metric)[1][-last:]))

    return Measure(f"final {metric.replace('_', ' ')} (mean of the last {last} evaluations)", of, ".4g", metric=metric)


def per_run(name: str, of: Callable[[Run], float], fmt: str = ".4g") -> Measure:
    """A paper's own per-run number (a diagnostic, a correlation) as a measure."""
    return Measure(name, of, fmt)


@dataclass(frozen=True)
class Claim:
    """One sentence of the paper, as data (see the module docstring for how it is judged)."""

    text: str
    experiment: str
    a: Mapping[str, Any]
    b: Mapping[str, Any] | None
    measure: Measure
    expect: str
    paper: str = ""  # the paper's own number or wording
    margin: float = 0.0
    value: float = 0.0  # compared with a's values when there is no b

    def __post_init__(self) -> None:
        if self.expect not in EXPECTATIONS:
            raise ValueError(f"claim {self.text!r}: expect must be one of {EXPECTATIONS}, not {self.expect!r}")


def speed(text: str, experiment: str, a: Mapping[str, Any], b: Mapping[str, Any], target: float,
          paper: str = "", continuous: str = "train_loss") -> list[Claim]:
    """A speed claim ("a converges faster than b") as two rows: rounds to ``target`` (censored)
    and the continuous counterpart, ``continuous`` averaged over the rounds (lower for a loss)."""
    better = "less" if "loss" in continuous else "greater"
    return [Claim(text, experiment, a, b, rounds_to(target), "less", paper),
            Claim(text, experiment, a, b, mean_over_rounds(continuous), better, paper)]


@dataclass
class Judgement:
    """A claim's measured outcome (what the report and ``<paper>.claims.json`` show)."""

    claim: Claim
    verdict: str  # agrees, disagrees, inconclusive, not run
    seeds: int = 0
    effect: float | None = None  # mean of the per-seed differences a - b (or a - value)
    low: float | None = None
    high: float | None = None
    a_median: float | None = None
    b_median: float | None = None
    on_paper_side: int = 0  # seeds whose difference goes the paper's way
    censored: tuple[int, int] = (0, 0)  # runs of a and b that never reached the target
    baseline_rounds: float | None = None  # b's median rounds to the claim's target, when it has one
    chosen: dict[str, Any] = field(default_factory=dict)  # values picked for BEST keys
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        c = self.claim
        return {
            "text": c.text, "experiment": c.experiment, "measure": c.measure.name, "expect": c.expect,
            "margin": c.margin, "a": _plain(c.a), "b": _plain(c.b) if c.b is not None else None,
            "value": None if c.b is not None else c.value, "chosen": self.chosen,
            "verdict": self.verdict, "seeds": self.seeds, "effect": _num(self.effect),
            "interval": [_num(self.low), _num(self.high)], "method": METHOD,
            "a_median": _num(self.a_median), "b_median": _num(self.b_median),
            "seeds_on_paper_side": self.on_paper_side, "never_reached": list(self.censored),
            "paper": c.paper, "baseline_median_rounds_to_target": _num(self.baseline_rounds),
            "target": c.measure.target, "note": self.note,
        }


def _plain(where: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in where.items()}


def _num(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), 6)


def pick(runs: Iterable[Run], where: Mapping[str, Any]) -> list[Run]:
    """Runs whose config has every ``dotted.key: value`` of ``where`` (every seed); a string value
    also matches a named part given by its name alone (``{"algorithm": "fedavg"}`` is
    ``{"algorithm": {"name": "fedavg"}}``, not FedAvg with a hyperparameter set)."""

    def matches(run: Run, key: str, want: Any) -> bool:
        got = value_at(run.config, key)
        return got == want or (isinstance(got, Mapping) and isinstance(want, str) and dict(got) == {"name": want})

    return [r for r in runs if all(matches(r, k, v) for k, v in where.items())]


def choose_best(runs: Sequence[Run], where: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Resolve :data:`BEST` values of ``where``: the value with the lowest training loss averaged over
    rounds and seeds, among the runs matching the rest. Returns (resolved where, chosen values)."""
    fixed = {k: v for k, v in where.items() if v != BEST}
    chosen: dict[str, Any] = {}
    for key in [k for k, v in where.items() if v == BEST]:
        candidates = pick(runs, {**fixed, **chosen})
        by_value: dict[str, tuple[Any, list[float]]] = {}
        loss = mean_over_rounds("train_loss")
        for run in candidates:
            value = value_at(run.config, key)
            by_value.setdefault(repr(value), (value, []))[1].append(loss.of(run))
        if not by_value:
            return {**fixed, key: BEST}, chosen
        finite = {k: (v, float(np.mean(ls))) for k, (v, ls) in by_value.items()}
        chosen[key] = min(finite.values(), key=lambda p: p[1] if math.isfinite(p[1]) else math.inf)[0]
    return {**fixed, **chosen}, chosen


def _side(runs: Sequence[Run], where: Mapping[str, Any]) -> tuple[list[Run], dict[str, Any]]:
    """The runs of one side of a claim, with the values chosen for its BEST keys."""
    resolved, chosen = choose_best(runs, where)
    return pick(runs, resolved), chosen


def bootstrap_interval(differences: Sequence[float], resamples: int = RESAMPLES, level: float = LEVEL,
                       seed: int = 0) -> tuple[float, float]:
    """Percentile interval of the mean of ``differences`` under resampling with replacement."""
    d = np.asarray(differences, dtype=float)
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(resamples, len(d)))].mean(axis=1)
    tail = (1.0 - level) / 2.0
    return float(np.quantile(means, tail)), float(np.quantile(means, 1.0 - tail))


def verdict(expect: str, low: float, high: float, margin: float = 0.0) -> str:
    """agrees / disagrees / inconclusive from the interval of a - b (see the module docstring)."""
    if expect == "less":
        return "agrees" if high < -margin else "disagrees" if low > -margin else "inconclusive"
    if expect == "greater":
        return "agrees" if low > margin else "disagrees" if high < margin else "inconclusive"
    if -margin <= low and high <= margin:
        return "agrees"
    return "disagrees" if low > margin or high < -margin else "inconclusive"


def judge(claim: Claim, runs: Sequence[Run] | None) -> Judgement:
    """The claim's verdict on the runs of its experiment (None: the experiment was not run)."""
    if runs is None:
        return Judgement(claim, "not run", note=f"experiment {claim.experiment} not run")
    a_runs, chosen = _side(runs, claim.a)
    b_runs, chosen_b = _side(runs, claim.b) if claim.b is not None else ([], {})
    chosen.update({f"b:{k}": v for k, v in chosen_b.items()})
    a = {r.seed: claim.measure.of(r) for r in a_runs}
    b = {r.seed: claim.measure.of(r) for r in b_runs} if claim.b is not None else {s: claim.value for s in a}
    seeds = sorted((s for s in set(a) & set(b) if math.isfinite(a[s]) and math.isfinite(b[s])), key=repr)
    if len(seeds) < 2:
        return Judgement(claim, "inconclusive", len(seeds), chosen=chosen,
                         note=f"{len(seeds)} paired seed(s): a has {len(a)} runs, b {len(b)}")
    d = [a[s] - b[s] for s in seeds]
    low, high = bootstrap_interval(d)
    sign = {"less": -1.0, "greater": 1.0}.get(claim.expect)
    side = sum(x * sign > 0 for x in d) if sign else sum(abs(x) <= claim.margin for x in d)
    judgement = Judgement(
        claim, verdict(claim.expect, low, high, claim.margin), len(seeds), float(np.mean(d)), low, high,
        float(np.median([a[s] for s in seeds])), float(np.median([b[s] for s in seeds])), int(side), chosen=chosen,
    )
    target = claim.measure.target
    if target is not None:
        metric = claim.measure.metric
        judgement.censored = (sum(not reached(r, target, metric) for r in a_runs),
                              sum(not reached(r, target, metric) for r in b_runs))
        judgement.baseline_rounds = judgement.b_median if claim.b is not None else None
    return judgement


def _short_key(key: str) -> str:
    return key.split(".")[-1]


def describe(where: Mapping[str, Any] | None, other: Mapping[str, Any] | None, chosen: Mapping[str, Any],
             prefix: str = "") -> str:
    """A setup in a few words: only what differs from the setup it is compared with (and a chosen η)."""
    if where is None:
        return ""
    parts = []
    for key, value in where.items():
        theirs = (other or {}).get(key)
        if value == BEST:
            parts.append(f"best {_short_key(key)} {chosen.get(prefix + key, '?')}")
        elif value == theirs and other is not None:
            continue
        elif isinstance(value, Mapping):
            extra = [f"{k} {v}" for k, v in value.items()
                     if k != "name" and not (isinstance(theirs, Mapping) and theirs.get(k) == v)]
            parts.append(" ".join([str(value.get("name", ""))] + extra).strip())
        elif isinstance(value, list):
            names = [str(v.get("kind", v.get("name", v))) if isinstance(v, Mapping) else str(v) for v in value]
            parts.append(f"{_short_key(key)} {'+'.join(names) if names else 'none'}")
        elif _short_key(key) in ("algorithm", "name", "split"):
            parts.append(str(value))
        else:
            parts.append(f"{_short_key(key)} {value}")
    return ", ".join(parts) or "as the other"


def numbers(j: Judgement) -> str:
    """The measured numbers of a judgement, one line for the report's table."""
    c, f = j.claim, j.claim.measure.fmt
    if j.effect is None:
        return j.note
    a_text = describe(c.a, c.b, j.chosen)
    b_text = f"{describe(c.b, c.a, j.chosen, 'b:')} {j.b_median:{f}}" if c.b is not None else f"reference {c.value:{f}}"
    text = (f"median {a_text} {j.a_median:{f}} vs {b_text}; "
            f"a − b = {j.effect:+{f}} [{j.low:+{f}}, {j.high:+{f}}], {j.on_paper_side}/{j.seeds} seeds the paper's way")
    if c.measure.target is not None and c.b is not None and j.a_median:
        text += f"; speed-up of the medians {j.b_median / j.a_median:.2f}×"
    if c.measure.target is not None and any(j.censored):
        text += f"; never reached by {j.censored[0]} and {j.censored[1]} runs (censored)"
    return text


def client_values(run: Run, key: str) -> dict[str, list[float]]:
    """Per client, the series of a per-client diagnostic (``clients/<id>/<key>``) over the rounds
    (empty for a run without diagnostics)."""
    from fedaccel.errors import UserError
    from fedaccel.report.diagnostics import per_client, read_diagnostics

    try:
        rows = read_diagnostics(run.path)
    except UserError:
        return {}
    return {client: [float(v) for v in values if v is not None] for client, (_, values) in per_client(rows, key).items()}


def mean_client_diagnostic(key: str) -> Callable[[Run], float]:
    """A per-run measure: the per-client diagnostic ``key`` averaged over clients and rounds."""

    def of(run: Run) -> float:
        values = [v for series in client_values(run, key).values() for v in series]
        return float(np.mean(values)) if values else math.nan

    return of
