"""Tables from run folders: rounds to a target and the rounds-to-target comparison table.

Example:
    >>> print(compare_table(["runs/demo"], targets=[0.8]))    # doctest: +SKIP
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedaccel.errors import UserError, listed, nearest_names, shown
from fedaccel.report.claims import final, last_round, reached, rounds_to
from fedaccel.report.claims import speed_up as speed_up_of
from fedaccel.report.completeness import run_gap
from fedaccel.runs.names import family_name
from fedaccel.report.reading import (
    Run,
    available_metrics,
    diverged_at,
    flatten_config,
    fmt_value,
    group_runs,
    grouping_config,
    higher_better,
    load_runs,
    metric_label,
    run_curve,
    series,
    value_at,
)
from fedaccel.report.statistics import ALPHA, sign_flip_p, t_interval


def rounds_to_target(
    run_or_group: Run | Sequence[Run] | tuple[str, Sequence[Run]],
    target: float,
    metric: str = "test_acc",
    higher_is_better: bool | None = None,
) -> float | None:
    """First round where ``metric`` reaches ``target`` (for a group: its mean curve), else None.

    "Reaches" means ``>= target``; for metrics whose name contains ``loss`` it means
    ``<= target`` unless ``higher_is_better`` says otherwise.
    """
    if isinstance(run_or_group, tuple) and len(run_or_group) == 2:
        if isinstance(run_or_group[0], str):  # a (label, runs) pair from group_runs
            run_or_group = run_or_group[1]
    if higher_is_better is None:
        higher_is_better = higher_better(metric)
    x, mean, _ = series(run_or_group, metric)
    hit = mean >= target if higher_is_better else mean <= target
    idx = np.flatnonzero(hit)
    return float(x[idx[0]]) if idx.size else None


def _fmt_num(v: float) -> str:
    if math.isnan(v):
        return "nan"
    return f"{v:.4f}"


def _fmt_rounds(r: float | None, diverged: int | None = None) -> str:
    """Rounds to a target; a target not reached says whether the group diverged (and when)."""
    if r is None:
        if diverged is not None:
            return "diverged" + (f" at round {diverged}" if diverged >= 0 else "")
        return "—"
    return str(int(r)) if float(r).is_integer() else f"{r:g}"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def _label_parts(label: str) -> tuple[str, set[str]]:
    """``"bherd (algorithm.alpha=1.0, data.split.name=case1)"`` -> ("bherd", {"algorithm.alpha=1.0", ...})."""
    name, _, rest = label.partition(" (")
    return name, set(rest[:-1].split(", ")) if rest.endswith(")") else set()


def check_baseline(runs: Sequence[Run], baseline: str) -> None:
    """:class:`UserError` where ``baseline`` names none of the groups of ``runs`` (a grid's cells, before they run)."""
    _baseline_indices(group_runs(list(runs)), baseline)


def _baseline_indices(groups: list[tuple[str, list[Run]]], baseline: str | None) -> list[int]:
    """For every group, the index of the group it is measured against.

    ``baseline`` is a label, or a method's name with config values in brackets that select among its
    groups (``fedavg`` when the grid also varies the split, ``bherd (algorithm.alpha=1.0)``): every group
    matching it is a baseline, and each group is measured against the matching one whose config agrees
    with its own in the most values — FedAvg on the same split, say.
    """
    labels = [label for label, _ in groups]
    flats = [{k: fmt_value(v) for k, v in flatten_config(grouping_config(g[0].config)).items()} for _, g in groups]
    if baseline is None:
        candidates = [i for i, (_, g) in enumerate(groups) if g[0].label == "fedavg"] or [0]
    elif baseline in labels:
        candidates = [labels.index(baseline)]
    else:
        name, wanted = _label_parts(baseline)
        candidates = [
            i for i, (label, g) in enumerate(groups)
            if name in (g[0].label, family_name(g[0].config))
            and wanted <= _label_parts(label)[1] | {f"{k}={v}" for k, v in flats[i].items()}
        ]
        if not candidates:
            close = nearest_names(baseline, labels, cutoff=0.6)[:1]  # whole, to copy (the list cuts long labels)
            raise UserError(f"unknown baseline {shown(baseline)}; the groups are: "
                            + listed([repr(s) for s in labels], near=repr(baseline))
                            + (f"; nearest: {close[0]!r}" if close else ""))

    def agreement(i: int, j: int) -> int:
        return sum(flats[i].get(k) == v for k, v in flats[j].items())

    base_of = [max(candidates, key=lambda c: (agreement(i, c), -c)) for i in range(len(groups))]
    if len(groups) > 1 and all(b == i for i, b in enumerate(base_of)):  # every group its own baseline
        base_of = [candidates[0]] * len(groups)  # (runs of one method, other settings): the first one
    return base_of


@dataclass
class SeedRounds:
    """Rounds to a target over a group's seeds: the interpolated crossing of each seed's own curve,
    restricted to its last round (where it never gets there: ``censored``), the claims' definition."""

    by_seed: dict[Any, float]
    censored: int
    never: frozenset = frozenset()  # the seeds that never got there (their value is their last round)
    budget: float | None = None  # the most rounds a seed can count: its runs' rounds budget (train.rounds)

    @property
    def reached(self) -> bool:
        return len(self.by_seed) > self.censored

    @property
    def all_never(self) -> bool:
        """Every seed measured, none got there (each counts as its last round)."""
        return bool(self.by_seed) and not self.reached

    @property
    def mean(self) -> float:
        return float(np.mean(list(self.by_seed.values())))

    def cell(self) -> str:
        """``mean [low–high]`` (95% t interval over seeds, cut to what the mean can be: from 0 rounds to the
        ``budget``, where a seed that never gets there counts), ``(k of n never)`` when some are censored,
        ``never (n of n)`` when all are; ``—`` without seeds."""
        if self.all_never:
            return f"never ({self.censored} of {len(self.by_seed)})"
        if not self.reached:
            return "—"
        text = _fmt_rounds(_rounded(self.mean))
        if len(self.by_seed) > 1:
            low, high = t_interval(list(self.by_seed.values()))
            top = high if self.budget is None else min(high, self.budget)
            low, high = (_fmt_rounds(_rounded(v)) for v in (max(low, 0.0), top))
            if high != low:
                text += f" [{low}–{high}]"
        if self.censored:
            text += f" ({self.censored} of {len(self.by_seed)} never)"
        return text


def _rounded(rounds: float) -> float:
    """Rounds as a table shows them: one decimal, two below one round (centralized SGD's 0.95 is not "1" beside the
    speed-up its 0.95 gives)."""
    return round(rounds, 1) if abs(rounds) >= 1 else round(rounds, 2)


def seed_rounds(group: Sequence[Run], target: float, metric: str = "test_acc") -> SeedRounds:
    """Each seed's rounds to ``target`` as the claims measure it (:func:`fedaccel.report.claims.rounds_to`). An
    unfinished or running run that has not reached it yet is left out: its last round is no budget. The budget is
    the largest of the runs' rounds budgets (``train.rounds``, or the last round where that is not set)."""
    measure, by_seed, never_seeds, budgets = rounds_to(target, metric), {}, set(), []
    for run in group:
        if run_curve(run, metric):
            never = not reached(run, target, metric)
            if never and run_gap(run) is not None:
                continue
            by_seed[run.seed] = measure.of(run)
            planned = value_at(run.config, "train.rounds")
            budgets.append(max(last_round(run), planned if isinstance(planned, int) else 0))
            if never:
                never_seeds.add(run.seed)
    return SeedRounds(by_seed, len(never_seeds), frozenset(never_seeds), float(max(budgets)) if budgets else None)


def speed_up(rounds: SeedRounds, base: SeedRounds) -> str:
    """The speed-up over the baseline (:func:`fedaccel.report.claims.speed_up`: the baseline's mean rounds
    over the row's, on the seeds both have), marked ``≈`` when the paired seeds cannot tell the two apart
    (the exact sign-flip test of the per-seed differences, p > 0.05, or fewer than two pairs). A side whose seeds
    all never got there counts them at their last round, as a side with some such seeds does: a bound; ``—`` where
    neither side has a seed that got there (two budgets, no speed-up), or the two share no seed."""
    if not (rounds.by_seed and base.by_seed) or not (rounds.reached or base.reached):
        return "—"
    seeds = [s for s in rounds.by_seed if s in base.by_seed]
    mine = float(np.mean([rounds.by_seed[s] for s in seeds])) if seeds else 0.0
    if mine <= 0:
        return "—"
    text = f"{speed_up_of(mine, float(np.mean([base.by_seed[s] for s in seeds]))):.2f}×"
    if rounds is base:
        return text
    # a censored seed's rounds are its last round, a lower bound: the baseline's make the speed-up a lower
    # bound, the row's an upper one, and both together no bound at all
    base_bound, row_bound = bool(base.never & set(seeds)), bool(rounds.never & set(seeds))
    text = ("≥ " if base_bound and not row_bound else "≤ " if row_bound and not base_bound else "") + text
    text += " ?" if base_bound and row_bound else ""
    d = [rounds.by_seed[s] - base.by_seed[s] for s in seeds]
    return text + (" ≈" if len(d) < 2 or sign_flip_p(d) > ALPHA else "")


def final_values(group: Sequence[Run], metric: str) -> list[float]:
    """Each run's final ``metric`` as the claims measure it (:func:`fedaccel.report.claims.final`)."""
    measure, values = final(metric), []
    for run in group:
        try:
            values.append(measure.of(run))
        except ValueError:  # no evaluation after round 0
            continue
    return values


def incomplete_note(group: Sequence[Run]) -> str:
    """`` (k of n runs incomplete)`` where runs of the row failed, stopped or still run: their numbers are of the
    rounds they reached, beside complete runs' (the line below the table names them); empty otherwise."""
    from fedaccel.report.completeness import run_gap

    k = sum(run_gap(run) is not None for run in group)
    return f" ({k} of {len(group)} runs incomplete)" if k else ""


def compare_table(
    runs: Sequence[Run] | Iterable[str | Path | Run],
    targets: Sequence[float],
    baseline: str | None = None,
    metric: str = "test_acc",
) -> str:
    """A Markdown table comparing the groups of ``runs`` (one row per group), and one line saying how.

    Columns: method, seeds, best (mean over seeds of each seed's best), final (each seed's final value as
    the claims measure it, the mean of its last 3 evaluations: mean ± std over seeds), then per target
    ``T`` the rounds to ``T`` (each seed's interpolated crossing, restricted to its last round, as the
    claims count it: the mean over seeds with its 95% t interval cut to [0, rounds budget], and how many never
    got there; ``never (n of n)`` when none did) and the speed-up (:func:`speed_up`: the baseline's mean rounds over
    the row's, on the seeds both have, a bound where seeds never got there), marked ``≈`` when the paired seeds
    cannot tell it from the baseline (``—`` when neither side ever reaches ``T``). ``baseline`` names the baseline
    groups (default ``fedavg``, else the first group): see :func:`_baseline_indices`. An unknown ``baseline`` raises :class:`UserError`.
    """
    runs = load_runs(runs)
    groups = group_runs(runs)
    if not groups:
        raise UserError("no runs to compare")
    if not any(run_curve(run, metric) for run in runs):
        raise UserError(f"no run records the metric {metric!r}; these do: "
                        f"{listed(available_metrics(runs), near=metric)}")
    base_of = _baseline_indices(groups, baseline)

    rounds = [[seed_rounds(g, t, metric) for t in targets] for _, g in groups]
    name = metric_label(metric)
    best_word = "best" if higher_better(metric) else "lowest"

    header = ["method", "seeds", f"{best_word} {name}", f"final {name}"]
    privacy = [privacy_cell(group) for _, group in groups]  # client-level DP: the budget spent (algorithm.dp)
    samples = [privacy_cell(group, SAMPLE_LEVEL) for _, group in groups]  # sample-level DP-SGD (train.dp_sgd)
    header += ["client ε (δ) spent"] * any(privacy) + ["sample ε (δ) spent"] * any(samples)
    for t in targets:
        header += [f"rounds to {t:g}", f"speed-up @{t:g}"]
    align = ["---"] + ["---:"] * (len(header) - 1)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]

    for i, (label, group) in enumerate(groups):
        x, _, _ = series(group, metric)
        if x.size:
            curves = [run_curve(r, metric) for r in group]  # once per run, not once per round
            per_run = np.array([[curve[int(k)] for k in x] for curve in curves])
            best = np.nanmax(per_run, axis=1) if higher_better(metric) else np.nanmin(per_run, axis=1)
            best_cell = _fmt_num(float(best.mean()))
            finals = np.array(final_values(group, metric))
            final_cell = _fmt_num(float(finals.mean())) if finals.size else "—"
            if finals.size > 1:
                final_cell += f" ± {_fmt_num(float(finals.std()))}"
        else:
            best_cell = final_cell = "—"
        is_baseline = i in base_of  # another's baseline, or its own (a group of the baseline method: 1.00x)
        shown = label + (" (baseline)" if is_baseline else "") + incomplete_note(group)
        row = [_md_cell(shown), str(len(group)), best_cell, final_cell]
        row += [privacy[i] or "no DP"] * any(privacy) + [samples[i] or "no DP-SGD"] * any(samples)
        diverged = diverged_at(group)
        for r, b in zip(rounds[i], rounds[base_of[i]]):
            row += [r.cell() if r.reached or diverged is None else _fmt_rounds(None, diverged), speed_up(r, b)]
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", ROUNDS_NOTE]
    return "\n".join(lines)


CLIENT_LEVEL = ("epsilon", ("algorithm", "dp"))  # the row's column, and where its delta is set
SAMPLE_LEVEL = ("sample_epsilon", ("train", "dp_sgd"))  # the largest client's epsilon under DP-SGD


def privacy_cell(group: Sequence[Run], level: tuple[str, tuple[str, str]] = CLIENT_LEVEL) -> str:
    """The largest epsilon a group's seeds spent by their last row, with its delta: client-level (``algorithm.dp``)
    or sample-level (``train.dp_sgd``, :data:`SAMPLE_LEVEL`); '' where the runs have no such guarantee."""
    column, (section, key) = level
    spent = [run.metrics[-1][column] for run in group if run.metrics and column in run.metrics[-1]]
    if not spent:
        return ""
    settings = group[0].config.get(section) if isinstance(group[0].config, dict) else None
    dp = settings.get(key) if isinstance(settings, dict) else None
    delta = dp.get("delta", 1e-5) if isinstance(dp, dict) else 1e-5
    return f"{max(spent):.3g} ({delta:g})"


ROUNDS_NOTE = ("Rounds to a target: each seed's interpolated crossing of the target, restricted to its last round "
               "(a seed that never gets there counts as its last round), the mean over seeds with its 95% t interval, cut to "
               "[0, the rounds budget]; never (n of n): no seed got there. "
               "Speed-up: the baseline's mean rounds over the row's, on the seeds both have; ≥ (≤) where seeds of the baseline "
               "(the row) never got there, their last round a bound; ? where both sides have such seeds; — where no seed of "
               "either got there, or the two share no seed. Final: each seed's mean "
               "of its last 3 evaluations, mean ± std over seeds. "
               "≈: the paired seeds cannot tell the row from its baseline (exact sign-flip test, p > 0.05; always with fewer than two pairs).")
