"""Claims as data, judged by one procedure on paired seeds (docs/statistics.md).

A :class:`Claim` is a row: the experiment, the two setups compared (``a`` and ``b``, config values
by dotted key), a :class:`Measure` of each run, the direction the paper states and the paper's own
number. :func:`judge` pairs the runs of ``a`` and ``b`` by seed and takes the per-seed differences
``d_s = m(a_s) - m(b_s)`` (or ``m(a_s) - value`` without ``b``); :func:`judge_family` then decides
every claim of one report together (:mod:`fedaccel.report.statistics`):

Every claim gets one two-sided p-value from its own test (:func:`claim_test`), Benjamini–Hochberg
adjusts them across the family, and the verdict is **agrees** when ``q <= 0.05`` on the paper's side,
**disagrees** when ``q <= 0.05`` on the other side, else **inconclusive** (with its minimum
detectable effect). The test:

- ``a`` against ``b`` on one measure without a margin (no effect means the runs are exchangeable): the
  exact paired sign-flip test of the *mean* difference, shown with the 95% interval that test inverts to
  (the shifts it does not reject: never one that contradicts it);
- a margin, a constant ``value`` or two measures (``measure_b``): nothing is exchangeable, so the
  exact sign test of the *median* difference against the margin, shown with its order-statistic
  interval; ``expect="equal"`` (which needs a margin) decides between "inside ``±margin``" (TOST) and
  "outside", each at half the level.

Rounds to a target are the interpolated crossing of the target (linear between evaluated rounds, so
ties vanish), restricted to the round budget: a run that never reaches it counts as the last round (a
restricted mean), and a rounds row is judged on those restricted differences, with its censored runs
counted; an "equal" rounds row more than a third censored on either side is not decided (pinned runs
differ by 0). A value of :data:`BEST` in ``a`` or ``b`` (``{"train.lr": BEST}``) picks the value whose
runs have the lowest training loss averaged over rounds, on at least :data:`MIN_TUNING_SEEDS` *tuning
seeds*; those seeds are never judged.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedaccel.errors import ConfigError
from fedaccel.runs.names import method_name
from fedaccel.report.reading import Run, value_at
from fedaccel.report.tuned import choice, tuned_swap_p
from fedaccel.report.statistics import (
    ALPHA,
    PLANNED_PAIRS,
    Bounds,
    bh_adjust,
    combined_interval,
    combined_p,
    detectable_effect,
    detectable_margin,
    detectable_staged,
    median_interval,
    outside_p,
    sign_flip_interval,
    sign_flip_p,
    sign_test_p,
    smallest_staged_p,
    stage_weights,
    swap_p,
    tost_p,
)

BEST = "best"  # in a claim's setup: the value of this key with the lowest mean training loss (tuning seeds)
MIN_TUNING_SEEDS = 3  # a BEST value is chosen on the mean over at least this many tuning seeds
METHODS = {  # claims.json's "method", by the estimand the claim's test is about
    "mean": ("exact paired sign-flip test of the mean per-seed difference a - b (two-sided), Benjamini-Hochberg "
             f"across the family at q <= {ALPHA:g}; effect: mean difference with the 95% interval the sign-flip test "
             "inverts to (the shifts it does not reject)"),
    "median": ("exact sign test of the median per-seed difference a - b against the margin or value (two-sided; "
               f"'equal': inside ±margin or outside, each at half the level), Benjamini-Hochberg at q <= {ALPHA:g}; "
               "effect: median difference with its order-statistic interval (coverage >= 95%)"),
}
STAGED_METHOD = ("seeds raised after a look: the stages' own one-sided tests (on each stage's seeds alone) combined "
                 "by the inverse normal with weights fixed before each stage (w_k^2 = n_k / cap, the last stage the "
                 "rest), each side at half the level; the interval inverts that combination")
STAGED_SWAP = ("a best-value row's stages swap the sides' labels at the values the tuning seeds chose (a's runs at "
               "b's value and b's at a's: exact given the tuning seeds, whose runs are no stage's)")
TUNED_METHOD = ("the sign flips swap the sides' labels on the tuning seeds too, each side choosing its best value "
                "again on every swap (the p-value counts the choice; fedaccel.report.tuned)")
EXPECTATIONS = ("less", "greater", "equal")
CENSORED_SHARE = 1 / 3  # beyond this share censored on either side, an "equal" rounds claim is not decided
MDE_POWER = 0.8  # an inconclusive row reports the effect it would have detected with this power


@dataclass(frozen=True)
class Measure:
    """A number per run: ``of(run)``, described by ``name`` (e.g. "rounds to 0.93 test accuracy")."""

    name: str
    of: Callable[[Run], float]
    fmt: str = ".4g"
    target: float | None = None  # for rounds-to-target measures: the accuracy aimed at
    metric: str = "test_acc"
    budget: Callable[[Run], float] | None = None  # rounds measures: the value of a censored run


def _curve(run: Run, metric: str, *, with_round_0: bool = False) -> tuple[np.ndarray, np.ndarray]:
    first = 0 if with_round_0 else 1
    rows = [(r["round"], r[metric]) for r in run.metrics if r.get(metric) is not None and r["round"] >= first]
    if not rows:
        raise ValueError(f"{run.path}: no {metric} recorded after round 0")
    x, y = np.array(rows, dtype=float).T
    return x, y


def last_round(run: Run) -> int:
    """The run's round budget: its last recorded round, or its configured rounds when it diverged (a run
    stopped by divergence never reached the target in its budget; its stop round is no faster crossing)."""
    recorded = max(int(r["round"]) for r in run.metrics)
    planned = value_at(run.config, "train.rounds")
    if run.summary and run.summary.get("diverged") and isinstance(planned, int):
        return max(recorded, planned)
    return recorded


def eval_interval(run: Run) -> int:
    rounds = sorted({int(r["round"]) for r in run.metrics})
    return int(min(np.diff(rounds))) if len(rounds) > 1 else 1


def reached(run: Run, target: float, metric: str = "test_acc") -> bool:
    """Whether ``run`` reaches ``target`` at all (round 0 included, as :func:`rounds_to` counts it)."""
    x, y = _curve(run, metric, with_round_0=True)
    return bool(np.any(y <= target if "loss" in metric else y >= target))


def crossing(x: np.ndarray, y: np.ndarray, target: float, lower_is_better: bool = False) -> float | None:
    """The round where the curve ``(x, y)`` first reaches ``target``, linear between evaluated rounds
    (None if it never does)."""
    hit = np.flatnonzero(y <= target if lower_is_better else y >= target)
    if not hit.size:
        return None
    i = int(hit[0])
    if i == 0 or y[i] == y[i - 1]:
        return float(x[i])
    return float(x[i - 1] + (target - y[i - 1]) / (y[i] - y[i - 1]) * (x[i] - x[i - 1]))


def rounds_to(target: float, metric: str = "test_acc") -> Measure:
    """Rounds until ``metric`` first reaches ``target`` (``<=`` for a loss), interpolated between evaluated
    rounds and restricted to the run's budget: a run that never reaches it counts as its last round."""

    def of(run: Run) -> float:
        x, y = _curve(run, metric, with_round_0=True)
        found = crossing(x, y, target, "loss" in metric)
        return float(last_round(run)) if found is None else min(found, float(last_round(run)))

    word = metric.replace("_", " ").replace("acc", "accuracy")
    return Measure(f"rounds to {target:g} {word} (interpolated, restricted)", of, ".3g", target=target, metric=metric,
                   budget=lambda run: float(last_round(run)))


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
    margin: float = 0.0  # in the measure's units; required (> 0) for "equal"
    value: float = 0.0  # compared with a's values when there is no b
    detect: float | None = None  # `judge --plan`: the true difference a - b to plan for (default: the pilot mean)
    measure_b: Measure | None = None  # b's measure when it differs from a's (two columns of the same runs)
    added: str = ""  # written after the runs had been seen (post hoc), and why: its own BH family, said in its row

    @property
    def b_measure(self) -> Measure:
        return self.measure_b or self.measure

    @property
    def exchangeable(self) -> bool:
        """No effect means a's and b's runs are exchangeable (b given, one measure, no margin): the exact
        sign-flip test of the mean; otherwise the sign test of the median (no symmetry to lean on)."""
        return self.b is not None and self.measure_b is None and self.margin == 0 and self.expect != "equal"

    def __post_init__(self) -> None:
        if self.expect not in EXPECTATIONS:
            raise ValueError(f"claim {self.text!r}: expect must be one of {EXPECTATIONS}, not {self.expect!r}")
        if self.expect == "equal" and not self.margin > 0:
            raise ValueError(f"claim {self.text!r}: a 'no difference' claim needs a margin > 0 in the measure's "
                             "units (how large a difference would not matter, and why)")
        if not (isinstance(self.margin, (int, float)) and math.isfinite(self.margin) and self.margin >= 0):
            raise ValueError(f"claim {self.text!r}: margin must be a number >= 0, not {self.margin!r}")


def speed(text: str, experiment: str, a: Mapping[str, Any], b: Mapping[str, Any], target: float,
          paper: str = "", continuous: str = "train_loss") -> list[Claim]:
    """A speed claim ("a converges faster than b") as two rows, each judged on its own: rounds to
    ``target`` (interpolated, restricted to the budget) and, worded as its own claim, ``continuous``
    averaged over the rounds (lower for a loss), which no run can fail to have."""
    better = "less" if "loss" in continuous else "greater"
    loss = mean_over_rounds(continuous)
    word = continuous.replace("_", " ")
    loss_text = f"{text}: {'lower' if better == 'less' else 'higher'} {word} averaged over the rounds"
    return [Claim(text, experiment, a, b, rounds_to(target), "less", paper),
            Claim(loss_text, experiment, a, b, loss, better, paper)]


@dataclass(frozen=True)
class Raised:
    """Seeds raised after a look at verdicts: ``how`` in words ("from 5 to 10 to 15"), and ``looks``, the seeds
    run before each look (stage 1, stage 2, ...; the last stage is every later seed). With ``looks`` a row is
    judged by the inverse-normal combination of its stages' own tests (:func:`staged_test`); without them the
    row only says "p not adjusted". ``cap``: the most judged pairs the raising rule aims at, fixed before the
    stages' data (the weights' w_k² = n_k / cap)."""

    how: str
    looks: tuple[tuple[Any, ...], ...] = ()
    cap: int = PLANNED_PAIRS

    def stage_of(self, seed: Any) -> int:
        return next((k for k, seeds in enumerate(self.looks) if seed in seeds), len(self.looks))

    def weights(self, tuning: Sequence[Any] = ()) -> list[float]:
        """The stages' weights for a row that judges every seed of ``looks`` but ``tuning`` (design sizes, not
        the pairs a row happened to have: a lost pair must not move a weight)."""
        return stage_weights([len(set(seeds) - set(tuning)) for seeds in self.looks] + [0], self.cap)


@dataclass
class Judgement:
    """A claim's measured outcome (what the report and ``<paper>.claims.json`` show)."""

    claim: Claim
    verdict: str  # agrees, disagrees, inconclusive, not run
    seeds: int = 0
    effect: float | None = None  # the tested estimate of the per-seed differences a - b (or a - value)
    low: float | None = None  # its interval (t for a mean, order statistics for a median)
    high: float | None = None
    a_mean: float | None = None  # a's and b's measure averaged over the paired seeds
    b_mean: float | None = None
    on_paper_side: int = 0  # seeds whose difference goes the paper's way
    censored: tuple[int, int] = (0, 0)  # runs of a and b that never reached the target
    baseline_rounds: float | None = None  # b's mean rounds to the claim's target, when it has one
    chosen: dict[str, Any] = field(default_factory=dict)  # values picked for BEST keys
    note: str = ""
    differences: list[float] = field(default_factory=list)  # per seed, in seed order
    paired_seeds: list[Any] = field(default_factory=list)
    p: float | None = None  # the claim's own two-sided test (claim_test)
    q: float | None = None  # Benjamini-Hochberg over the family
    tuning_seeds: list[Any] = field(default_factory=list)  # seeds BEST values were chosen on (never judged)
    sides: tuple[int, int] = (0, 0)  # runs of a and b (censoring shares)
    estimand: str = "mean"  # what the test is about: the mean or the median difference
    paper_side: bool = False  # the test's evidence points the paper's way
    undecided: str = ""  # why a claim with a p-value stays out of the family (an over-censored "equal" row)
    mde: float | None = None  # inconclusive rows: the effect detectable with MDE_POWER (None: n too small)
    mde_pooled: bool = False  # a raised row's mde is for its seeds pooled, not for the stages its p combines
    stage_floor: float | None = None  # a raised row whose stages cannot reach the level: the smallest p they give
    non_finite: dict[str, list[Any]] = field(default_factory=dict)  # seeds left out: a side's measure not finite
    tuning: dict[str, Any] = field(default_factory=dict)  # per BEST key: every value's figures on the tuning seeds
    tuned_test: bool = False  # p counts the choice of the best values (fedaccel.report.tuned)
    unpaired: dict[str, list[Any]] = field(default_factory=dict)  # per side, seeds the other side has no run of
    raised: str = ""  # the seeds were raised after a look at verdicts (how); p not adjusted unless ``stages``
    stages: list[list[Any]] = field(default_factory=list)  # raised seeds: the paired seeds of each stage, combined
    stage_weights: list[float] = field(default_factory=list)  # their inverse-normal weights (squares sum to 1)
    stage_swap: bool = False  # a best-value row's stages swap the sides' labels at the chosen values
    swapped: list[float] = field(default_factory=list)  # then: each seed's difference with the labels swapped
    censored_seeds: dict[str, list[Any]] = field(default_factory=dict)  # "equal" rounds rows: the intervals' seeds

    def as_method(self) -> str:
        return METHODS[self.estimand] + ("; " + TUNED_METHOD if self.tuned_test else "")

    @property
    def in_family(self) -> bool:
        """Whether the claim's own test enters the family's multiplicity control."""
        return self.p is not None and not self.undecided

    def as_dict(self) -> dict[str, Any]:
        c = self.claim
        return {
            "text": c.text, "experiment": c.experiment, "measure": c.measure.name, "expect": c.expect,
            "margin": c.margin, "a": _plain(c.a), "b": _plain(c.b) if c.b is not None else None,
            "value": None if c.b is not None else c.value, "chosen": self.chosen, "tuning": self.tuning,
            "verdict": self.verdict, "seeds": self.seeds, "paired_seeds": self.paired_seeds,
            "differences": [_num(d) for d in self.differences], "estimand": self.estimand,
            "effect": _num(self.effect), "interval": [_num(self.low), _num(self.high)], "p": _num(self.p),
            "q": _num(self.q), "mde": _num(self.mde), "method": METHODS[self.estimand],
            "a_mean": _num(self.a_mean), "b_mean": _num(self.b_mean),
            "seeds_on_paper_side": self.on_paper_side, "censored": list(self.censored),
            "non_finite": self.non_finite, "tuning_seeds": self.tuning_seeds, "undecided": self.undecided,
            "paper": c.paper, "baseline_mean_rounds_to_target": _num(self.baseline_rounds),
            "target": c.measure.target, "note": self.note,
        } | ({"method": METHODS["mean"] + "; " + TUNED_METHOD} if self.tuned_test else {}) | (
            {"measure_b": c.measure_b.name} if c.measure_b is not None else {}) | (
            {"unpaired": self.unpaired} if self.unpaired else {}) | (
            {"post_hoc": c.added} if c.added else {}) | ({"seeds_raised": self.raised} if self.raised else {}) | (
            {"stages": self.stages, "stage_weights": self.stage_weights,
             **({"swapped_differences": [_num(x) for x in self.swapped]} if self.stage_swap else {}),
             "method": "; ".join([self.as_method(), STAGED_METHOD, *([STAGED_SWAP] if self.stage_swap else [])])}
            if self.stages else {}) | (
            {"censored_seeds": self.censored_seeds} if self.censored_seeds else {}) | (
            {"mde_pooled": True} if self.mde_pooled else {}) | (
            {"smallest_p_at_stages": self.stage_floor} if self.stage_floor is not None else {})


def _plain(where: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in where.items()}


def _num(x: float | None) -> float | None:
    """A number for claims.json at full precision (JSON writes a float's shortest exact repr); None if
    not finite."""
    return None if x is None or not math.isfinite(x) else float(x)


def seed_order(seed: Any) -> tuple[int, float, str]:
    """Seeds in numeric order (1, 2, 10), any other value after them by its repr."""
    number = isinstance(seed, (int, float)) and not isinstance(seed, bool)
    return (0, float(seed), "") if number else (1, 0.0, repr(seed))


def pick(runs: Iterable[Run], where: Mapping[str, Any]) -> list[Run]:
    """Runs whose config has every ``dotted.key: value`` of ``where`` (every seed): see :func:`selects`."""
    return [r for r in runs if run_selects(where, r)]


SPENT = "epsilon"  # a claim side's key for the client-level budget a run reached: {epsilon: {at_most: 4}}


def spent(run: Run) -> float | None:
    """The client-level epsilon a run had spent by its last row (``algorithm.dp``); None without DP."""
    last = run.metrics[-1] if run.metrics else {}
    value = last.get(SPENT)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def run_selects(where: Mapping[str, Any], run: Run) -> bool:
    """:func:`selects` for a run that has finished: its reached epsilon counts for :data:`SPENT`."""
    return selects(where, run.spec, run.config, spent=spent(run))


def within_budget(bound: float, reached: float | None, spec: Mapping[str, Any] | None,
                  config: Mapping[str, Any] | None, unknown: bool) -> bool:
    """Whether a cell's client-level epsilon is at most ``bound``: the one it ``reached``; before it has run, its
    ``algorithm.dp.target_epsilon``; a cell without ``algorithm.dp`` spends none and is never selected, one given
    a noise multiplier counts as ``unknown`` until it has run."""
    if reached is not None:
        return reached <= bound
    dp = next((d for d in (at(config, "algorithm.dp"), at(spec, "algorithm.dp")) if isinstance(d, Mapping)), None)
    if dp is None:
        return False
    target = dp.get("target_epsilon")
    return unknown if target is None else float(target) <= bound


def spent_bound(want: Any, where: str) -> float:
    """The ``at_most`` of a claim side's ``epsilon: {at_most: X}``; one ConfigError line otherwise."""
    bound = want.get("at_most") if isinstance(want, Mapping) and set(want) == {"at_most"} else None
    if isinstance(bound, bool) or not isinstance(bound, (int, float)) or not 0 < bound < math.inf:
        raise ConfigError(f"{where}: epsilon selects runs by the client-level epsilon they reached and takes "
                          "{at_most: X} with X > 0, e.g. {algorithm: fedavg, epsilon: {at_most: 4}}")
    return float(bound)


ABSENT = object()  # a key a config does not have


def at(mapping: Mapping[str, Any] | None, dotted: str) -> Any:
    """``mapping``'s value at ``a.b.c`` (a string section counts as ``{name: ...}``), else :data:`ABSENT`."""
    node: Any = mapping
    for part in dotted.split("."):
        if isinstance(node, str):
            node = {"name": node}
        if not isinstance(node, Mapping) or part not in node:
            return ABSENT
        node = node[part]
    return node


def same_value(got: Any, want: Any) -> bool:
    """Equal, or a named part given by its name alone on either side (``fedavg`` is ``{name: fedavg}``,
    not FedAvg with a hyperparameter set)."""
    def named(x: Any) -> Any:
        return dict(x) if isinstance(x, Mapping) else {"name": x} if isinstance(x, str) else x

    return got is not ABSENT and (got == want or named(got) == named(want))


def selects(where: Mapping[str, Any], spec: Mapping[str, Any] | None, config: Mapping[str, Any] | None,
            unknown: bool = False, spent: float | None = None) -> bool:
    """Whether a cell has every ``dotted.key: value`` of ``where``, as the experiment file spells it
    (``spec``: presets and shorthand as written) or as resolved (``config``); :data:`BEST` takes any value.
    A key that neither holds (no ``config``: a cell not run yet) counts as ``unknown``. :data:`SPENT`
    (``epsilon: {at_most: X}``) holds where the run's reached epsilon, ``spent``, is at most X; before a run
    (``spent`` None) it counts as ``unknown``."""
    def has(key: str, want: Any) -> bool:
        if key == SPENT:
            return within_budget(spent_bound(want, "claim"), spent, spec, config, unknown)
        got = [at(spec, key), at(config, key)]
        if want == BEST:
            return any(g is not ABSENT for g in got) or (config is None and unknown)
        if any(same_value(g, want) for g in got):
            return True
        return config is None and unknown and got[0] is ABSENT

    return all(has(k, v) for k, v in where.items())


def runs_by_value(runs: Iterable[Run], key: str) -> dict[str, tuple[Any, dict[Any, Run]]]:
    """The runs by their value of ``key`` (keyed by its repr, in first-seen order), each as (value, {seed: run})."""
    table: dict[str, tuple[Any, dict[Any, Run]]] = {}
    for run in runs:
        value = value_at(run.config, key)
        table.setdefault(repr(value), (value, {}))[1][run.seed] = run
    return table


SELECTION = mean_over_rounds("train_loss")  # what a BEST value is chosen on (never the test set)


def tuning_figures(runs: Sequence[Run], where: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Per :data:`BEST` key of ``where``, among the runs matching the rest (give only the tuning seeds'
    runs): every value's :data:`SELECTION` on each tuning seed common to all values, their mean, and the
    chosen value (the lowest finite mean). Fewer than :data:`MIN_TUNING_SEEDS` common seeds is a
    :class:`ConfigError`."""
    fixed = {k: v for k, v in where.items() if v != BEST}
    chosen: dict[str, Any] = {}
    figures: dict[str, dict[str, Any]] = {}
    for key in [k for k, v in where.items() if v == BEST]:
        by_value = {name: (value, {seed: SELECTION.of(run) for seed, run in by_seed.items()})
                    for name, (value, by_seed) in runs_by_value(pick(runs, {**fixed, **chosen}), key).items()}
        if not by_value:
            continue
        seeds = sorted(set.intersection(*(set(s) for _, s in by_value.values())), key=seed_order)
        if len(seeds) < MIN_TUNING_SEEDS:
            raise ConfigError(f"a best {key} needs runs of every value on at least {MIN_TUNING_SEEDS} tuning seeds; "
                              f"the values share {len(seeds)} ({', '.join(map(str, seeds)) or 'none'})")
        values = [{"value": value, "by_seed": [by_seed[s] for s in seeds],
                   "mean": float(np.mean([by_seed[s] for s in seeds]))} for value, by_seed in by_value.values()]
        best = min(values, key=lambda v: v["mean"] if math.isfinite(v["mean"]) else math.inf)
        chosen[key] = best["value"]
        figures[key] = {"chosen": best["value"], "measure": SELECTION.name, "seeds": seeds,
                        "values": [{**v, "by_seed": [_num(x) for x in v["by_seed"]], "mean": _num(v["mean"])}
                                   for v in values]}
    return figures


def choose_best(runs: Sequence[Run], where: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Resolve :data:`BEST` values of ``where`` on the tuning seeds' runs (:func:`tuning_figures`).
    Returns (resolved where, chosen values); a key no run matches stays :data:`BEST`."""
    chosen = {key: f["chosen"] for key, f in tuning_figures(runs, where).items()}
    return {**{k: v for k, v in where.items() if v != BEST}, **chosen,
            **{k: BEST for k, v in where.items() if v == BEST and k not in chosen}}, chosen


def _tunes(claim: Claim) -> bool:
    return any(v == BEST for v in claim.a.values()) or (claim.b is not None and any(v == BEST for v in claim.b.values()))


def _side(runs: Sequence[Run], where: Mapping[str, Any], tuning: Sequence[Any]) -> tuple[list[Run], dict[str, Any]]:
    """The judged runs of one side of a claim, with the values chosen on the tuning seeds for its BEST keys."""
    resolved, chosen = choose_best([r for r in runs if r.seed in tuning], where)
    return [r for r in pick(runs, resolved) if r.seed not in tuning], chosen


def _tuned_p(claim: Claim, runs: Sequence[Run], tuning: Sequence[Any], seeds: Sequence[Any],
             chosen: Mapping[str, Any]) -> float | None:
    """The p-value of :func:`~fedaccel.report.tuned.tuned_swap_p` for a claim whose sides choose one
    BEST key (the same key on both), or None where it cannot be computed: not an exchangeable claim,
    other BEST keys, or a candidate value some side lacks on some tuning or judged seed."""
    keys = {k for side in (claim.a, claim.b or {}) for k, v in side.items() if v == BEST}
    if not claim.exchangeable or len(keys) != 1 or any(k not in claim.b for k in keys):
        return None
    key = keys.pop()
    tables = [runs_by_value(pick(runs, {k: v for k, v in where.items() if k != key}), key)
              for where in (claim.a, claim.b)]
    values = [tables[0][r][0] for r in tables[0]] + [tables[1][r][0] for r in tables[1] if r not in tables[0]]
    names = [repr(v) for v in values]
    try:
        grid = [[[tables[x][name][1][s] for s in [*tuning, *seeds]] for name in names] for x in (0, 1)]
        fixed = tuple(None if where[key] == BEST else
                      next(i for i, v in enumerate(values) if same_value(v, where[key])) for where in (claim.a, claim.b))
    except (KeyError, StopIteration):
        return None
    selection = np.array([[[SELECTION.of(r) for r in row[:len(tuning)]] for row in side] for side in grid])
    measure = np.array([[[claim.measure.of(r) for r in row[len(tuning):]] for row in side] for side in grid])
    agree = all(values[choice(selection[x])] == chosen.get(("b:" if x else "") + key, values[choice(selection[x])])
                for x in (0, 1) if fixed[x] is None)
    if not agree or not np.all(np.isfinite(measure)):
        return None
    return tuned_swap_p(selection, measure, fixed)  # type: ignore[arg-type]


def _swapped_at_choice(claim: Claim, runs: Sequence[Run], tuning: Sequence[Any], seeds: Sequence[Any],
                       chosen: Mapping[str, Any]) -> list[float] | None:
    """A best-value row's differences with the sides' labels swapped at the chosen values (b's setup at a's value
    less a's setup at b's value, per judged seed), for :func:`staged_test`; None where the grid lacks a run or
    the claim is not an exchangeable one with one BEST key."""
    keys = {k for side in (claim.a, claim.b or {}) for k, v in side.items() if v == BEST}
    if not claim.exchangeable or claim.b is None or len(keys) != 1:
        return None
    key = next(iter(keys))
    va, vb = chosen.get(key, claim.a.get(key, BEST)), chosen.get("b:" + key, claim.b.get(key, BEST))
    if BEST in (va, vb):
        return None
    by_seed = []
    for where in ({**claim.b, key: va}, {**claim.a, key: vb}):
        found: dict[Any, list[Run]] = {}
        for run in pick(runs, where):
            found.setdefault(run.seed, []).append(run)
        if any(len(found.get(s, [])) != 1 for s in seeds):
            return None
        by_seed.append({s: found[s][0] for s in seeds})
    swapped = [claim.measure.of(by_seed[0][s]) - claim.measure.of(by_seed[1][s]) for s in seeds]
    return swapped if all(math.isfinite(x) for x in swapped) else None


def _one_run_per_seed(claim: Claim, runs: Sequence[Run], side: str) -> None:
    """A side has one run per seed; two would be paired by whichever came last (a ConfigError names them)."""
    seen: dict[Any, Run] = {}
    for run in runs:
        if run.seed in seen:
            raise ConfigError(f"claim {claim.text!r}: side {side} selects two runs of seed {run.seed}, "
                              f"{seen[run.seed].path.name} and {run.path.name}: give the side the key that tells "
                              "them apart")
        seen[run.seed] = run


def short_rounds(side: str, runs: Sequence[Run]) -> str:
    """Where a side's robust rule could not meet its condition in some rounds (partial participation: fewer
    updates than Krum's n > 2f + 2 or Bulyan's n >= 4f + 3; the runs' ``uploaded`` column), one clause saying in
    how many; empty otherwise."""
    from fedaccel.algorithms.robust import fewest_uploads

    short = total = 0
    need = None
    for run in runs:
        need = fewest_uploads(value_at(run.config, "algorithm.aggregate")) or need
        if need is None:
            continue
        counts = [r["uploaded"] for r in run.metrics if isinstance(r.get("uploaded"), int) and r.get("round", 0) >= 1]
        short, total = short + sum(n < need[2] for n in counts), total + len(counts)
    if not short or need is None:
        return ""
    rule, words, least = need
    return (f"{side}'s {rule} needs {words} (at least {least} updates): {short} of its {total} rounds had fewer "
            "(partial participation), where its condition does not hold")


def _shift(claim: Claim) -> float:
    """The centre a directional claim is tested against: ``a - b = ∓margin`` (``-margin`` for less)."""
    return -claim.margin if claim.expect == "less" else claim.margin


def claim_test(claim: Claim, d: Sequence[float], bounds: Bounds | None = None) -> tuple[float, bool, str]:
    """The claim's own two-sided test on the differences ``d``: (p, whether the evidence lies on the
    paper's side, the estimand "mean" or "median"); see the module docstring. ``bounds``: an "equal"
    rounds claim's censored differences as the intervals they are known to lie in (:func:`censored_bounds`)."""
    x = np.asarray(d, dtype=float)
    if claim.expect == "equal":
        inside, outside = tost_p(x, claim.margin, bounds), outside_p(x, claim.margin, bounds)
        return min(1.0, 2 * min(inside, outside)), inside < outside, "median"
    if claim.exchangeable:
        mean = float(x.mean())
        return sign_flip_p(x), (mean < 0 if claim.expect == "less" else mean > 0), "mean"
    above = sign_test_p(x, "greater", centre=_shift(claim))
    below = sign_test_p(x, "less", centre=_shift(claim))
    return min(1.0, 2 * min(above, below)), (below < above if claim.expect == "less" else above < below), "median"


def _one_sided(claim: Claim, d: np.ndarray, bounds: Bounds | None, swapped: np.ndarray | None,
               shift: float = 0.0) -> dict[str, float | None]:
    """The one-sided tests :func:`claim_test` builds its p from, on one stage's differences (``None`` for a stage
    without pairs, or with every pair tied), the effect shifted by ``shift`` (the interval's inversion)."""
    if d.size == 0:
        return dict.fromkeys(("inside_low", "inside_high", "out_high", "out_low") if claim.expect == "equal" else
                             ("greater", "less"))
    if claim.expect == "equal":
        low, high = bounds if bounds is not None else (d, d)
        low, high = np.asarray(low, dtype=float) - shift, np.asarray(high, dtype=float) - shift
        m = claim.margin
        return {"inside_low": sign_test_p(low, "greater", centre=-m), "inside_high": sign_test_p(high, "less", centre=m),
                "out_high": sign_test_p(low, "greater", centre=m), "out_low": sign_test_p(high, "less", centre=-m)}
    if claim.exchangeable:
        other = -d if swapped is None else swapped
        sides = {alternative: swap_p(d - shift, other + shift, alternative) for alternative in ("greater", "less")}
    else:
        sides = {alternative: sign_test_p(d - shift, alternative, centre=_shift(claim)) for alternative in ("greater", "less")}
    # p = 1 on both sides: every pair tied (each swap, or sign, changes nothing), a test that can say nothing. It
    # counts as a stage without pairs (z = 0), not as p = 1 (z = -inf, which held the combined p at 1 whatever the
    # other stages showed). Valid: the tests condition on what decides it (the pairs' sizes, the ties).
    return dict.fromkeys(sides) if all(p == 1.0 for p in sides.values()) else sides


def staged_test(claim: Claim, d: Sequence[float], stage: Sequence[int], weights: Sequence[float],
                bounds: Bounds | None = None, swapped: Sequence[float] | None = None) -> tuple[float, bool, str]:
    """:func:`claim_test` for seeds raised after looks: each one-sided test the claim's p is made of, run on each
    stage's differences alone (``stage[i]``: the stage of difference i) and combined across stages by the inverse
    normal (:func:`~fedaccel.report.statistics.combined_p`, ``weights`` fixed before each stage); the two-sided p
    twice the smaller side, "equal" as TOST against "outside" as in :func:`claim_test`. Valid whatever sizes the
    later stages were given from the earlier ones' data. Returns (p, paper side, estimand). ``swapped``: a
    best-value row's differences with the sides' labels swapped at the chosen values (default: ``-d``)."""
    c = _combined(claim, d, stage, weights, bounds, swapped)
    if claim.expect == "equal":
        inside, outside = max(c["inside_low"], c["inside_high"]), min(c["out_high"], c["out_low"])
        return min(1.0, 2 * min(inside, outside)), inside < outside, "median"
    p = min(1.0, 2 * min(c["greater"], c["less"]))
    paper_side = c["less"] < c["greater"] if claim.expect == "less" else c["greater"] < c["less"]
    return p, bool(paper_side), "mean" if claim.exchangeable else "median"


def _combined(claim: Claim, d: Sequence[float], stage: Sequence[int], weights: Sequence[float],
              bounds: Bounds | None = None, swapped: Sequence[float] | None = None,
              shift: float = 0.0) -> dict[str, float]:
    """Each one-sided test of :func:`_one_sided`, combined across the stages."""
    x, labels_ = np.asarray(d, dtype=float), np.asarray(stage)
    other = None if swapped is None else np.asarray(swapped, dtype=float)
    parts = []
    for k in range(len(weights)):
        i = np.flatnonzero(labels_ == k)
        part_bounds = None if bounds is None else (np.asarray(bounds[0], dtype=float)[i],
                                                   np.asarray(bounds[1], dtype=float)[i])
        parts.append(_one_sided(claim, x[i], part_bounds, None if other is None else other[i], shift))
    return {key: combined_p([part[key] for part in parts], weights) for key in parts[0]}


def staged_interval(claim: Claim, d: Sequence[float], stage: Sequence[int], weights: Sequence[float],
                    swapped: Sequence[float] | None = None) -> tuple[float, float]:
    """The interval :func:`staged_test` inverts to: for a mean, the shifts of the effect its combined sign-flip (or
    swap) tests do not reject; for a median, the centres its combined sign tests do not reject."""
    x, labels_ = np.asarray(d, dtype=float), np.asarray(stage)
    where = [np.flatnonzero(labels_ == k) for k in range(len(weights))]
    if claim.exchangeable:  # the swap's labels moved apart by 2c: its range spans the swapped differences too
        span = x if swapped is None else np.concatenate([x, -np.asarray(swapped, dtype=float)])
        return combined_interval(lambda at: _combined(claim, x, stage, weights, None, swapped, at)["greater"],
                                 lambda at: _combined(claim, x, stage, weights, None, swapped, at)["less"], span)

    def moved(at: float, alternative: str) -> float:
        return combined_p([sign_test_p(x[i] - at, alternative) if i.size else None for i in where], weights)

    return combined_interval(lambda at: moved(at, "greater"), lambda at: moved(at, "less"), x)


def censored_bounds(d: Sequence[float], a_censored: Sequence[bool], b_censored: Sequence[bool]) -> Bounds:
    """Where each restricted difference a - b of rounds can truly lie: a censored run never reached the target
    in its budget, so its rounds are at least its counted last round and a - b is unbounded above (a
    censored) or below (b censored); both censored, anything."""
    low = [-math.inf if cb else x for x, cb in zip(d, b_censored)]
    high = [math.inf if ca else x for x, ca in zip(d, a_censored)]
    return low, high


def claim_p_value(claim: Claim, d: Sequence[float]) -> float:
    """The p-value of the claim's own test on the differences ``d`` (:func:`claim_test`)."""
    return claim_test(claim, d)[0]


def verdict(j: Judgement, q: float | None, alpha: float = ALPHA) -> str:
    """agrees / disagrees / inconclusive from the adjusted p-value ``q`` and the side of the evidence."""
    if q is None or q > alpha or j.undecided:
        return "inconclusive"
    return "agrees" if j.paper_side else "disagrees"


def minimum_detectable(j: Judgement) -> float | None:
    """The effect the claim's test detects with :data:`MDE_POWER` at its pairs and observed sd, all pooled: a mean
    difference, a median beyond the margin, or for "equal" the margin it could show."""
    d = np.asarray(j.differences, dtype=float)
    if d.size < 2 or (j.claim.measure.target is not None and min(j.censored) >= d.size):
        return None  # every run of both sides counted at the budget: no seed count detects anything there
    sd = float(d.std(ddof=1))
    if j.claim.expect == "equal":
        return detectable_margin(sd, d.size, power=MDE_POWER)
    return detectable_effect(sd, d.size, median=j.estimand == "median", power=MDE_POWER)


def staged_detectable(j: Judgement) -> tuple[float | None, bool, float | None]:
    """A raised row's smallest detectable effect at the stages its p combines: (the effect, whether it is for the
    pooled seeds instead, the smallest p the stages can give where that is above the level and nothing can be
    detected). A median or "equal" row's is exact at the stages (sign tests, normal differences); a mean row's
    sign-flip tests have no such sum, so its effect is the pooled seeds' (said in the row)."""
    sizes = [len(stage) for stage in j.stages]
    floor = smallest_staged_p(sizes, j.stage_weights)
    if floor > ALPHA:
        return None, False, floor
    pooled = minimum_detectable(j)
    if pooled is None or j.estimand == "mean":
        return pooled, pooled is not None, None
    sd = float(np.std(j.differences, ddof=1))
    staged = detectable_staged(sd, sizes, j.stage_weights, equal=j.claim.expect == "equal", power=MDE_POWER)
    return (pooled, True, None) if staged is None else (staged, False, None)


def _decide(j: Judgement, q: float | None, alpha: float = ALPHA) -> None:
    j.q = q
    j.verdict = verdict(j, q, alpha)
    j.mde, j.mde_pooled, j.stage_floor = None, False, None
    if j.verdict == "inconclusive" and not j.undecided:
        if j.stages:
            j.mde, j.mde_pooled, j.stage_floor = staged_detectable(j)
        else:
            j.mde = minimum_detectable(j)


def judge(claim: Claim, runs: Sequence[Run] | None, tuning_seeds: Sequence[Any] = (),
          raised: Raised | None = None) -> Judgement:
    """The claim's measurements and its own test on the runs of its experiment (None: not run), its
    verdict as a family of one; :func:`judge_family` decides a report's claims together. BEST values are
    chosen on ``tuning_seeds`` (at least :data:`MIN_TUNING_SEEDS`), whose runs are then left out of the
    claim's pairs. ``raised``: the experiment's seeds were raised after looks at verdicts; with its stages
    known the p is :func:`staged_test`'s, else the row says it is not adjusted."""
    if runs is None:
        return Judgement(claim, "not run", note=f"experiment {claim.experiment} not run")
    tuning = list(tuning_seeds) if _tunes(claim) else []
    if _tunes(claim) and len(tuning) < MIN_TUNING_SEEDS:
        raise ConfigError(f"claim {claim.text!r} picks a best value: it needs at least {MIN_TUNING_SEEDS} tuning seeds "
                          f"(used only to choose it, never judged), not {len(tuning)}")
    a_runs, chosen = _side(runs, claim.a, tuning)
    b_runs, chosen_b = _side(runs, claim.b, tuning) if claim.b is not None else ([], {})
    chosen.update({f"b:{k}": v for k, v in chosen_b.items()})
    tuned = [r for r in runs if r.seed in tuning]
    record = tuning_figures(tuned, claim.a) if tuning else {}
    if tuning and claim.b is not None:
        record.update({f"b:{k}": v for k, v in tuning_figures(tuned, claim.b).items()})
    _one_run_per_seed(claim, a_runs, "a")
    _one_run_per_seed(claim, b_runs, "b")
    short = [line for side, side_runs in (("a", a_runs), ("b", b_runs)) if (line := short_rounds(side, side_runs))]
    a = {r.seed: claim.measure.of(r) for r in a_runs}
    b = {r.seed: claim.b_measure.of(r) for r in b_runs} if claim.b is not None else {s: claim.value for s in a}
    both = sorted(set(a) & set(b), key=seed_order)
    unpaired = {side: sorted(set(mine) - set(theirs), key=seed_order) for side, mine, theirs in (("a", a, b), ("b", b, a))}
    unpaired = {side: seeds for side, seeds in unpaired.items() if seeds}
    non_finite = {side: [s for s in both if not math.isfinite(values[s])] for side, values in (("a", a), ("b", b))}
    non_finite = {side: seeds for side, seeds in non_finite.items() if seeds}
    seeds = [s for s in both if math.isfinite(a[s]) and math.isfinite(b[s])]
    left_out = "; ".join([*(f"seed(s) {', '.join(map(str, s))} left out: {side}'s measure is not finite"
                            for side, s in non_finite.items()),
                          *(f"seed(s) {', '.join(map(str, s))} of {side} left out: no partner in {'ba'[side == 'b']}"
                            for side, s in unpaired.items()), *short])
    if len(seeds) < 2:
        note = f"{len(seeds)} paired seed(s): a has {len(a)} runs, b {len(b)}"
        return Judgement(claim, "inconclusive", len(seeds), chosen=chosen, tuning_seeds=tuning, tuning=record,
                         non_finite=non_finite, unpaired=unpaired, note="; ".join(filter(None, [note, left_out])))
    d = [a[s] - b[s] for s in seeds]
    cut = _equal_rounds_censored(claim, seeds, a_runs, b_runs)
    bounds = censored_bounds(d, *cut) if cut is not None else None
    if bounds is not None:
        left_out = "; ".join(filter(None, [left_out, CENSORED_EQUAL]))
    p, paper_side, estimand = claim_test(claim, d, bounds)
    staged, swapped, stage, weights = None, None, [], []
    if raised is not None and raised.looks:
        weights = raised.weights(tuning)
        stage = [raised.stage_of(s) for s in seeds]
        swapped = _swapped_at_choice(claim, runs, tuning, seeds, chosen) if tuning else None
        staged = staged_test(claim, d, stage, weights, bounds, swapped)
        p, paper_side, estimand = staged
    tuned = _tuned_p(claim, runs, tuning, seeds, chosen) if tuning and staged is None else None
    if tuned is not None:
        p = tuned
    elif tuning and swapped is None:
        left_out = "; ".join(filter(None, [left_out, "p does not count the choice of the best value (each value "
                                           "run by both sides on every seed is what lets it)"]))
    effect = float(np.mean(d)) if estimand == "mean" else float(np.median(d))
    if swapped is not None and staged is not None:  # what the swap at the chosen values tests: a - b at each value
        effect = float(np.mean(d) - np.mean(swapped)) / 2
    if staged is not None:
        low, high = staged_interval(claim, d, stage, weights, swapped)
    else:
        low, high = sign_flip_interval(d) if estimand == "mean" else median_interval(d)
    if claim.expect == "equal":
        side = sum(abs(x) <= claim.margin for x in d)
    else:
        side = sum((x - _shift(claim)) * (-1.0 if claim.expect == "less" else 1.0) > 0 for x in d)
    judgement = Judgement(
        claim, "inconclusive", len(seeds), effect, low, high,
        float(np.mean([a[s] for s in seeds])), float(np.mean([b[s] for s in seeds])), int(side), chosen=chosen,
        differences=[float(x) for x in d], paired_seeds=seeds, p=p, tuning_seeds=tuning, estimand=estimand,
        paper_side=paper_side, non_finite=non_finite, tuning=record, note=left_out, tuned_test=tuned is not None,
        unpaired=unpaired, raised=raised.how if raised is not None else "",
        stages=[[s for s, k in zip(seeds, stage) if k == i] for i in range(len(weights))] if staged else [],
        stage_weights=weights if staged else [], stage_swap=swapped is not None, swapped=list(swapped or []),
        censored_seeds={} if cut is None else {side: [s for s, c in zip(seeds, flags) if c]
                                               for side, flags in zip("ab", cut)},
    )
    target = claim.measure.target
    if target is not None:
        metric, metric_b = claim.measure.metric, claim.b_measure.metric
        paired = set(seeds)
        judgement.censored = (sum(not reached(r, target, metric) for r in a_runs if r.seed in paired),
                              sum(not reached(r, target, metric_b) for r in b_runs if r.seed in paired))
        judgement.sides = (len(seeds), len(seeds) if claim.b is not None else 0)
        judgement.baseline_rounds = judgement.b_mean if claim.b is not None else None
        if claim.expect == "equal" and too_censored(judgement):
            judgement.undecided = (f"{judgement.censored[0]} and {judgement.censored[1]} runs never reached the "
                                   "target: restricted to the budget they differ by nothing, which is no evidence "
                                   "of equal speed")
    _decide(judgement, judgement.p if judgement.in_family else None)
    return judgement


CENSORED_EQUAL = ("censored differences counted as the intervals they lie in: equivalence only where every "
                  "placement of the censored runs beyond the budget agrees")


def _equal_rounds_censored(claim: Claim, seeds: Sequence[Any], a_runs: Sequence[Run],
                           b_runs: Sequence[Run]) -> tuple[list[bool], list[bool]] | None:
    """Per paired seed, whether a's and b's runs of an "equal" rounds claim are censored (for
    :func:`censored_bounds`); None when none is, or the claim is of another kind. Pinned at the budget, two
    censored runs differ by 0 and TOST read that as equal: 5.9% false equivalence at the margin with 30%
    censored, n = 20."""
    target = claim.measure.target
    if target is None or claim.expect != "equal":
        return None
    a_by, b_by = {r.seed: r for r in a_runs}, {r.seed: r for r in b_runs}
    a_cut = [not reached(a_by[s], target, claim.measure.metric) for s in seeds]
    b_cut = [claim.b is not None and not reached(b_by[s], target, claim.b_measure.metric) for s in seeds]
    return (a_cut, b_cut) if any(a_cut) or any(b_cut) else None


def too_censored(j: Judgement) -> bool:
    """More than :data:`CENSORED_SHARE` of either side never reached the claim's target."""
    return any(n and c > CENSORED_SHARE * n for c, n in zip(j.censored, j.sides))


def judge_family(judgements: Sequence[Judgement], alpha: float = ALPHA) -> list[Judgement]:
    """Decide a report's claims together: Benjamini-Hochberg over the p-values of the claims in the
    family (every claim with a p-value except an undecided one), verdicts from the q-values. Claims written
    after the runs had been seen (``Claim.added``) form a family of their own: a row added later never moves
    the q-value of one committed before the runs."""
    for post_hoc in (False, True):
        family = [j for j in judgements if j.in_family and bool(j.claim.added) == post_hoc]
        for j, q in zip(family, bh_adjust([j.p for j in family])):
            _decide(j, q, alpha)
    return list(judgements)


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
        elif key == "algorithm" and (isinstance(value, str) or isinstance(value, Mapping) and "name" in value):
            parts.append(method_name(value))  # the one name tables, legends and progress lines give it
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


def speed_up(rounds_a: float, rounds_b: float) -> float:
    """The speed-up of a over b: b's mean rounds to the target over a's (restricted means over the paired
    seeds), the one definition the tables, ``compare``, ``judge`` and the reports use."""
    return rounds_b / rounds_a


ESTIMATES = {"mean": "mean a − b", "median": "the median seed's a − b"}  # what each test is about, in a row's words


POST_HOC = "added after the runs had been seen: its own Benjamini-Hochberg family"
RAISED = "seeds raised after a look ({}), p not adjusted"
COMBINED = "seeds raised after a look ({}): p combines its stages' own tests (inverse normal{})"


def labels(j: Judgement | Mapping[str, Any]) -> list[str]:
    """What a row must say about how it came to be judged: added after the runs had been seen, seeds raised
    after a look, with p combined across the stages or not adjusted (a judgement, or its claims.json entry)."""
    added, raised, stages, weights = ((j.claim.added, j.raised, j.stages, j.stage_weights) if isinstance(j, Judgement)
                                      else (j.get("post_hoc", ""), j.get("seeds_raised", ""), j.get("stages"),
                                            j.get("stage_weights")))
    if not raised:
        said = []
    elif stages:
        sizes = "; stages of " + ", ".join(str(len(s)) for s in stages) + " seeds"
        squares = ", weights² " + ", ".join(f"{w * w:.3g}" for w in weights) if weights else ""
        said = [COMBINED.format(raised, sizes + squares)]
    else:
        said = [RAISED.format(raised)]
    return [*([POST_HOC] if added else []), *said]


def interval(j: Judgement) -> str:
    """The interval the row's test inverts to, in words: the sign-flip test's for a mean, the sign test's
    (order statistics) for the median seed."""
    f = j.claim.measure.fmt
    if j.low is None or j.high is None or not math.isfinite(j.low) or not math.isfinite(j.high):
        return "no 95% interval at these stages" if j.stages else "too few seeds for a 95% interval"
    kind = "stages combined 95%" if j.stages else "sign-flip 95%" if j.estimand == "mean" else "≥ 95%"
    return f"{kind}: {j.low:+{f}}, {j.high:+{f}}"


def numbers(j: Judgement) -> str:
    """The measured numbers of a judgement, one line for the report's table."""
    c, f = j.claim, j.claim.measure.fmt
    if j.effect is None:
        return j.note
    a_text = describe(c.a, c.b, j.chosen)
    b_text = f"{describe(c.b, c.a, j.chosen, 'b:')} {j.b_mean:{f}}" if c.b is not None else f"reference {c.value:{f}}"
    if c.measure_b is not None:  # the same setups measured two ways: name the measures
        a_text = f"{a_text} ({c.measure.name})".replace("as the other (", "(")
        b_text = f"{describe(c.b, c.a, j.chosen, 'b:')} ({c.measure_b.name}) {j.b_mean:{f}}".replace("as the other (", "(")
    test = f"p = {j.p:.3g}, q = {j.q:.3g}" if j.q is not None else f"p = {j.p:.3g}"
    estimate = ESTIMATES[j.estimand]
    if j.stage_swap and not np.allclose(j.swapped, [-x for x in j.differences], rtol=1e-12, atol=0.0):
        estimate = "a − b at each side's chosen value, averaged over the two (what the labels' swap tests)"
    text = (f"mean {a_text} {j.a_mean:{f}} vs {b_text}; {estimate} = {j.effect:+{f}} [{interval(j)}], "
            f"{test}, {j.on_paper_side}/{j.seeds} seeds the claimed way")
    if c.expect == "equal" or c.margin:
        bound = f"±{c.margin:{f}}" if c.expect == "equal" else f"{c.margin:{f}}"
        text += f"; margin {bound} on the median seed's difference, not on every seed's"
    if c.measure.target is not None and c.b is not None and j.a_mean:
        text += f"; speed-up {speed_up(j.a_mean, j.b_mean):.2f}×"
    if c.measure.target is not None and any(j.censored):
        text += (f"; restricted to the budget: never reached by {j.censored[0]} and {j.censored[1]} runs "
                 "(counted at the last round)")
    if j.undecided:
        text += f"; not decided: {j.undecided}"
    if j.stage_floor is not None:
        what = "margin could be shown" if c.expect == "equal" else "difference could be detected"
        text += f"; could not tell: no {what} at these stages: the smallest p they can give is {j.stage_floor:.3g}"
    elif j.mde is not None:
        what = "margin it could show" if c.expect == "equal" else f"{j.estimand} difference it could detect"
        basis = (", for the seeds pooled, not the stages its p combines" if j.mde_pooled else
                 ", stages combined" if j.stages else "")
        text += f"; could not tell: the smallest {what} is {j.mde:{f}} ({MDE_POWER:.0%} power{basis})"
    if j.note:
        text += f"; {j.note}"
    text += "".join(f"; {label}" for label in labels(j))
    if j.tuning_seeds:
        text += f"; best values chosen on seed(s) {', '.join(map(str, j.tuning_seeds))}"
    return text


def client_values(run: Run, key: str) -> dict[str, list[float]]:
    """Per client, the series of a per-client diagnostic (``clients/<id>/<key>``) over the rounds
    (empty for a run without diagnostics)."""
    from fedaccel.errors import UserError
    from fedaccel.report.diagnostics import per_client

    try:
        rows = run.diagnostics_rows()
    except UserError:
        return {}
    return {client: [float(v) for v in values if v is not None] for client, (_, values) in per_client(rows, key).items()}


def mean_client_diagnostic(key: str) -> Callable[[Run], float]:
    """A per-run measure: the per-client diagnostic ``key`` averaged over clients and rounds."""

    def of(run: Run) -> float:
        values = [v for series in client_values(run, key).values() for v in series]
        return float(np.mean(values)) if values else math.nan

    return of
