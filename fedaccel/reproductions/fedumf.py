"""Claims of the FedUMF paper (paper 004: Section 5, Tables 1-4, Figs. 3-10; Appendix A, Tables A1-A2)
checked on our runs.

Rounds-to-target comparisons use the same target accuracies as the experiment files (``TARGETS``,
chosen by the runs' dataset), so one claim reads the paper scale (MNIST, CIFAR-10) and the quick scale
(Fashion-MNIST) alike.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from fedaccel.reproduce import Claim
from fedaccel.reproductions import pick, value_at
from fedaccel.results import Run, rounds_to_target, series

TITLE = "FedUMF — Model Fusion from Unauthorized Clients in Federated Learning"
INTRO = """
FedUMF lets the clients that are not authorised to upload train anyway, and a client authorised after
a round without authorisation starts from the global model plus α times its stored update. The paper
compares it with FedAvg (Tables 1-4: rounds to reach target accuracies) and, combined with FedDC, with
FedProx, SCAFFOLD, FedDyn and FedDC (Tables A1-A2).

What the quick scale changes (each experiment file's comment has the sizing):

- **Data and model.** Fashion-MNIST (embedded) instead of MNIST, and McMahan et al.'s 2NN (784-200-200-10)
  instead of the paper's MNIST network: FedUMF trains every client every round, and a CNN step costs
  ~28× a 2NN step on a CPU. Fashion-MNIST is harder, so the target accuracies are lower (IID 70-86%
  instead of 92-97%, non-IID 50-75% instead of 91-96%, Table A2's 95% becomes 80%).
- **Tables 1-2 and the α curves.** N = 30 clients of 600 samples (an 18,000-sample subset), so every
  client runs τ = 12 local steps a round, as 100 clients × 600 MNIST samples would; C ∈ {0.1, 0.5}
  authorises 3 or 15 of them. B = 50, K = 1, momentum 0.5, weight decay 5e-4, T = 150 as the paper.
  The α curves run η = 0.01 only, for 120 rounds. The paper gives no N; the paper scale uses 100.
- **Tables A1-A2.** N = 20 (paper 100), 15% / 65% participation = 3 / 13 clients, T = 60 rounds (the paper
  gives no T; FedDC's MNIST code runs 300), the 2NN with 100 units of the paper's appendix; otherwise
  Appendix A's settings (B = 50, K = 1, η = 0.1 × 0.998^t, μ = 1e-4, FedDyn and FedDC α = 0.01) and
  FedDC's reference code's (weight decay 1e-3, no momentum, Dirichlet with equal client sizes). The
  paper's "FedUmf" column is FedUMF combined with FedDC (Appendix A), run as `fedumf-feddc`; plain
  `fedumf` is run too.
- Test accuracy on 5,000 test samples; one seed per cell. Tables 3-4 (CIFAR-10, ResNet-18) and the
  CIFAR-10 part of Table A1 exist at paper scale only; their claims read "cannot tell" here.

A claim "agrees" when the measured numbers go the way the paper says. "Rounds a→b" below are FedAvg's
(or the baseline's) and FedUMF's rounds to a target; "never" means not within T rounds. FedUMF's price
is computation, not communication: every client trains every round (1/C times FedAvg's local steps)
while the same C·N clients upload; the cost rows report both.
"""

#: Target accuracies (the experiment files' ``targets``) per experiment and dataset.
TARGETS: dict[tuple[str, str], tuple[float, ...]] = {
    ("table1_iid", "mnist"): (0.92, 0.93, 0.94, 0.95, 0.96, 0.97),
    ("table1_iid", "fashion-mnist"): (0.70, 0.75, 0.80, 0.82, 0.84, 0.86),
    ("table2_noniid", "mnist"): (0.91, 0.92, 0.93, 0.94, 0.95, 0.96),
    ("table2_noniid", "fashion-mnist"): (0.50, 0.55, 0.60, 0.65, 0.70, 0.75),
    ("fig_alpha", "mnist"): (0.92, 0.93, 0.94, 0.95, 0.96, 0.97),
    ("fig_alpha", "fashion-mnist"): (0.70, 0.75, 0.80, 0.82, 0.84),
    ("tables3_4", "cifar10"): (0.30, 0.40, 0.45, 0.50, 0.55, 0.60, 0.65, 0.70),
}
#: Table A2's single target per dataset (MNIST 95%, CIFAR-10 70%; quick Fashion-MNIST 80%).
A2_TARGET: dict[str, float] = {"mnist": 0.95, "fashion-mnist": 0.80, "emnist": 0.91, "cifar10": 0.70,
                               "cifar100": 0.35}

IID = {"data.split.name": "iid", "data.split.sizes": None}
UNBALANCED = {"data.split.name": "iid", "data.split.sizes": "lognormal"}
DIRICHLET = {"data.split.name": "dirichlet"}
NONIID = {"data.split.name": "label-k"}
A1_SPLITS = {"iid": IID, "unbalanced": UNBALANCED, "Dirichlet 0.6": DIRICHLET}
A1_BASELINES = {"FedAvg": "fedavg", "FedProx": "fedprox", "SCAFFOLD": "scaffold", "FedDyn": "feddyn",
                "FedDC": "feddc"}
PAPER_UMF = "fedumf-feddc"  # Table A1's "FedUmf": FedUMF combined with FedDC

Check = Callable[[list[Run]], tuple[bool | None, str]]


# ----------------------------------------------------------------------------------------------
# Small helpers over runs
# ----------------------------------------------------------------------------------------------


def overall(verdicts: list[bool | None], numbers: str) -> tuple[bool | None, str]:
    """One verdict over several settings: "cannot tell" if any setting cannot tell (or none ran),
    else whether every setting agrees."""
    if not verdicts:
        return None, "runs missing"
    if None in verdicts:
        return None, numbers
    return all(verdicts), numbers


def _dataset(runs: list[Run]) -> str | None:
    return value_at(runs[0].config, "data.dataset") if runs else None


def _targets(runs: list[Run], experiment: str) -> tuple[float, ...]:
    """The experiment's targets for the runs' dataset (Table A2's one target for the A1 experiments);
    otherwise 85-100% of the lowest final accuracy, keeping those above every run's round-0 accuracy."""
    dataset = str(_dataset(runs))
    known = TARGETS.get((experiment, dataset))
    if known:
        return known
    if experiment.startswith("tableA1") and dataset in A2_TARGET:
        return (A2_TARGET[dataset],)
    finals = [f for f in (_final(r) for r in runs) if f is not None]
    if not finals:
        return ()
    start = max((row["test_acc"] for r in runs for row in r.metrics if row.get("round") == 0 and "test_acc" in row),
                default=0.0)
    return tuple(t for t in (round(min(finals) * k, 3) for k in (0.85, 0.9, 0.95, 1.0)) if t > start)


def _rounds(runs: list[Run], target: float) -> float | None:
    return rounds_to_target(runs, target) if runs else None


def _final(runs: Run | list[Run], metric: str = "test_acc") -> float | None:
    runs = [runs] if isinstance(runs, Run) else runs
    if not runs:
        return None
    _, mean, _ = series(runs, metric)
    return float(mean[-1]) if len(mean) else None


def _auc(runs: list[Run]) -> float | None:
    """Mean test accuracy over the evaluated rounds (area under the curve / rounds)."""
    if not runs:
        return None
    x, mean, _ = series(runs, "test_acc")
    return float(mean[x > 0].mean()) if (x > 0).any() else None


def _total_at(runs: list[Run], key: str, round_: float | None = None) -> float | None:
    """Mean over seeds of a cumulative total (``local_steps``, ``bytes_up``) at ``round_`` (default: last)."""
    values = []
    for run in runs:
        rows = [row for row in run.metrics if key in row and row.get("round") is not None]
        if round_ is not None:
            rows = [row for row in rows if row["round"] == round_]
        if rows:
            values.append(float(rows[-1][key]))
    return float(np.mean(values)) if values else None


def _fmt_r(rounds: float | None) -> str:
    return "never" if rounds is None else f"{rounds:g}"


def _fmt_big(value: float | None) -> str:
    if value is None:
        return "?"
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.3g}{unit}"
    return f"{value:g}"


def _pct(t: float) -> str:
    return f"{t * 100:g}%"


def _cell(split: Mapping[str, Any], lr: float | None = None, c: float | None = None) -> dict[str, Any]:
    where = dict(split)
    if lr is not None:
        where["train.lr"] = lr
    if c is not None:
        where["train.client_fraction"] = c
    return where


def _algo(name: str, alpha: float | None = None) -> dict[str, Any]:
    where: dict[str, Any] = {"algorithm.name": name}
    if alpha is not None:
        where["algorithm.alpha"] = alpha
    return where


def _values(runs: list[Run], key: str) -> list[Any]:
    return sorted({value_at(r.config, key) for r in runs} - {None})


def _umf(runs: list[Run], where: Mapping[str, Any], alpha: float | None = 1.0, name: str = "fedumf") -> list[Run]:
    """FedUMF runs with fusion coefficient ``alpha`` (a config without ``alpha`` has the default, 1)."""
    chosen = pick(runs, {**where, **_algo(name)})
    if alpha is None:
        return chosen
    return [r for r in chosen if value_at(r.config, "algorithm.alpha") in ((alpha, None) if alpha == 1.0 else (alpha,))]


def _pair(runs: list[Run], where: Mapping[str, Any], alpha: float | None) -> tuple[list[Run], list[Run]]:
    return pick(runs, {**where, **_algo("fedavg")}), _umf(runs, where, alpha)


def _common_best(targets: Sequence[float], groups: Sequence[list[Run]]) -> tuple[float | None, list[float | None]]:
    """The highest target every group reaches, with each group's rounds to it."""
    for t in sorted(targets, reverse=True):
        rounds = [_rounds(g, t) for g in groups]
        if all(r is not None for r in rounds):
            return t, rounds
    return None, [None] * len(groups)


# ----------------------------------------------------------------------------------------------
# Tables 1-4: FedUMF against FedAvg
# ----------------------------------------------------------------------------------------------


def _no_later(experiment: str, split: Mapping[str, Any], lr: float, c: float, alpha: float = 1.0) -> Check:
    """FedUMF reaches every target no later than FedAvg, and at least one strictly sooner."""

    def check(runs: list[Run]) -> tuple[bool | None, str]:
        avg, umf = _pair(runs, _cell(split, lr, c), alpha)
        if not avg or not umf:
            return None, "runs missing"
        pairs = [(t, _rounds(avg, t), _rounds(umf, t)) for t in _targets(runs, experiment)]
        numbers = "rounds FedAvg→FedUMF: " + ", ".join(f"{_pct(t)} {_fmt_r(a)}→{_fmt_r(u)}" for t, a, u in pairs)
        reached = [(t, a, u) for t, a, u in pairs if a is not None or u is not None]
        if not reached:
            return None, numbers + " (no target reached)"
        later = [t for t, a, u in reached if u is None or (a is not None and u > a)]
        sooner = [t for t, a, u in reached if u is not None and (a is None or u < a)]
        return (not later and bool(sooner)), numbers

    return check


def _fewer_rounds_band(experiment: str, split: Mapping[str, Any], lr: float, low: float, high: float) -> Check:
    """FedUMF's reduction in rounds at the highest target both reach lies in [low, high] for every C."""

    def check(runs: list[Run]) -> tuple[bool | None, str]:
        parts, verdicts = [], []
        for c in _values(pick(runs, _cell(split, lr)), "train.client_fraction"):
            avg, umf = _pair(runs, _cell(split, lr, c), 1.0)
            if not avg or not umf:
                continue
            t, (a, u) = _common_best(_targets(runs, experiment), [avg, umf])
            if t is None:
                parts.append(f"C = {c:g}: no target reached by both")
                verdicts.append(None)
                continue
            cut = 1 - u / a
            parts.append(f"C = {c:g}: {cut:.0%} fewer at {_pct(t)} ({a:g}→{u:g})")
            verdicts.append(low <= cut <= high)
        return overall(verdicts, "; ".join(parts))

    return check


def _speedup(runs: list[Run], where: Mapping[str, Any], targets: Sequence[float], alpha: float) -> float | None:
    avg, umf = _pair(runs, where, alpha)
    ratios = [a / u for a, u in ((_rounds(avg, t), _rounds(umf, t)) for t in targets) if a and u]
    return float(math.exp(np.mean(np.log(ratios)))) if ratios else None


def _gap_shrinks_with_c(experiment: str, split: Mapping[str, Any], lr: float | None = None, alpha: float = 1.0) -> Check:
    """FedUMF's speed-up over FedAvg is larger at C = 0.1 than at C = 0.5 (for each η present, or ``lr``)."""

    def check(runs: list[Run]) -> tuple[bool | None, str]:
        lrs = [lr] if lr is not None else _values(pick(runs, split), "train.lr")
        parts, verdicts = [], []
        for eta in lrs:
            groups = [g for c in (0.1, 0.5) for g in _pair(runs, _cell(split, eta, c), alpha)]
            if not all(groups):
                continue
            # targets every one of the four runs reaches, so both speed-ups are measured on the same ones
            common = [t for t in _targets(runs, experiment) if all(_rounds(g, t) is not None for g in groups)]
            if not common:
                parts.append(f"η = {eta:g}: no target reached by all four runs")
                verdicts.append(None)
                continue
            low_c, high_c = (_speedup(runs, _cell(split, eta, c), common, alpha) for c in (0.1, 0.5))
            parts.append(f"η = {eta:g}: speed-up C = 0.1 {low_c:.2f}×, C = 0.5 {high_c:.2f}× "
                         f"(geometric mean over {', '.join(_pct(t) for t in common)})")
            verdicts.append(low_c > high_c)
        return overall(verdicts, "; ".join(parts))

    return check


def _cells(runs: list[Run], split: Mapping[str, Any]) -> list[tuple[float, float]]:
    sub = pick(runs, split)
    return [(eta, c) for eta in _values(sub, "train.lr") for c in _values(sub, "train.client_fraction")]


def _final_higher(split: Mapping[str, Any], alpha: float = 1.0) -> Check:
    """After T rounds FedUMF's test accuracy is above FedAvg's in every (η, C) cell."""

    def check(runs: list[Run]) -> tuple[bool | None, str]:
        parts, verdicts = [], []
        for eta, c in _cells(runs, split):
            avg, umf = _pair(runs, _cell(split, eta, c), alpha)
            fa, fu = _final(avg), _final(umf)
            if fa is None or fu is None:
                continue
            parts.append(f"η = {eta:g}, C = {c:g}: {fa:.4f} vs {fu:.4f}")
            verdicts.append(fu > fa)
        return overall(verdicts, "final test accuracy FedAvg vs FedUMF: " + "; ".join(parts))

    return check


def _all_cells_no_later(experiment: str, split: Mapping[str, Any], alpha: float) -> Check:
    """``_no_later`` in every (η, C) cell of the split."""

    def check(runs: list[Run]) -> tuple[bool | None, str]:
        parts, verdicts = [], []
        for eta, c in _cells(runs, split):
            verdict, numbers = _no_later(experiment, split, eta, c, alpha)(runs)
            if numbers == "runs missing":
                continue
            parts.append(f"η = {eta:g}, C = {c:g}: {numbers.removeprefix('rounds FedAvg→FedUMF: ')}")
            verdicts.append(verdict)
        return overall(verdicts, "rounds FedAvg→FedUMF: " + "; ".join(parts))

    return check


def _alpha_order(experiment: str, split: Mapping[str, Any], c: float, alphas: Sequence[float] = (0.1, 0.5, 1.0)) -> Check:
    """Larger α is better: mean test accuracy over the run increases with α (for each η present)."""

    def check(runs: list[Run]) -> tuple[bool | None, str]:
        parts, verdicts = [], []
        for eta in _values(pick(runs, _cell(split, None, c)), "train.lr"):
            where = _cell(split, eta, c)
            groups = [_umf(runs, where, a) for a in alphas]
            if not all(groups):
                continue
            aucs = [_auc(g) for g in groups]
            if any(v is None for v in aucs):
                continue
            avg_auc = _auc(pick(runs, {**where, **_algo("fedavg")}))
            t, rounds = _common_best(_targets(runs, experiment), groups)
            text = ", ".join(f"α = {a:g} {v:.4f}" for a, v in zip(alphas, aucs))
            if avg_auc is not None:
                text += f", FedAvg {avg_auc:.4f}"
            if t is not None:
                text += f"; rounds to {_pct(t)}: " + ", ".join(f"α = {a:g} {r:g}" for a, r in zip(alphas, rounds))
            parts.append(f"η = {eta:g}: mean test accuracy over the rounds {text}")
            verdicts.append(all(x < y for x, y in itertools.pairwise(aucs)))
        return overall(verdicts, "; ".join(parts))

    return check


def _alpha_pairs(runs: list[Run], split: Mapping[str, Any]) -> tuple[bool | None, str]:
    """α = 1 beats α = 0.5 in mean test accuracy in every (η, C) cell present."""
    parts, verdicts = [], []
    for eta, c in _cells(runs, split):
        where = _cell(split, eta, c)
        low, high = (_auc(_umf(runs, where, a)) for a in (0.5, 1.0))
        if low is None or high is None:
            continue
        parts.append(f"η = {eta:g}, C = {c:g}: α = 0.5 {low:.4f}, α = 1 {high:.4f}")
        verdicts.append(high > low)
    return overall(verdicts, "mean test accuracy over the rounds: " + "; ".join(parts))


# ----------------------------------------------------------------------------------------------
# Cost: communication and computation
# ----------------------------------------------------------------------------------------------


def _cost_cells(runs: list[Run], split: Mapping[str, Any], base: str, umf: str) -> list[tuple[str, float, list[Run], list[Run]]]:
    """(description, C, baseline runs, FedUMF runs) for every (η, C) or (split, C) cell present."""
    cells = []
    sub = pick(runs, split)
    for eta in _values(sub, "train.lr") or [None]:
        for c in _values(sub, "train.client_fraction"):
            where = _cell(split, eta, c)
            b, u = pick(runs, {**where, **_algo(base)}), _umf(runs, where, 1.0, umf)
            if b and u:
                label = (f"η = {eta:g}, " if eta is not None else "") + f"C = {c:g}"
                cells.append((label, c, b, u))
    return cells


def _communication(experiment: str, split: Mapping[str, Any], base: str = "fedavg", umf: str = "fedumf",
                   to_target: bool = True) -> Check:
    """Same upload bytes per round as the baseline (totals within 1%); with ``to_target``, also no more
    bytes than the baseline to reach the highest target both reach."""

    def check(runs: list[Run]) -> tuple[bool | None, str]:
        parts, verdicts = [], []
        for label, _, b, u in _cost_cells(runs, split, base, umf):
            bb, bu = _total_at(b, "bytes_up"), _total_at(u, "bytes_up")
            if not bb or bu is None:
                continue
            ok = abs(bu / bb - 1) < 0.01
            text = f"{label}: total up {_fmt_big(bb)}B vs {_fmt_big(bu)}B"
            t, (rb, ru) = _common_best(_targets(runs, experiment), [b, u])
            if t is not None:
                xb, xu = _total_at(b, "bytes_up", rb), _total_at(u, "bytes_up", ru)
                text += f", to {_pct(t)} {_fmt_big(xb)}B vs {_fmt_big(xu)}B"
                if to_target:
                    ok = ok and xb is not None and xu is not None and xu <= xb
            parts.append(text)
            verdicts.append(ok)
        if not verdicts:
            return None, "runs missing (or no bytes_up in the metrics)"
        return all(verdicts), "; ".join(parts)

    return check


def _computation(experiment: str, split: Mapping[str, Any], base: str = "fedavg", umf: str = "fedumf") -> Check:
    """All N clients train every round: FedUMF's local steps are ≈ 1/C times the baseline's (±10%)."""

    def check(runs: list[Run]) -> tuple[bool | None, str]:
        parts, verdicts = [], []
        for label, c, b, u in _cost_cells(runs, split, base, umf):
            sb, su = _total_at(b, "local_steps"), _total_at(u, "local_steps")
            if not sb or su is None:
                continue
            ratio = su / sb
            text = f"{label}: total steps {_fmt_big(sb)} vs {_fmt_big(su)} ({ratio:.2f}×, 1/C = {1 / c:.2f})"
            t, (rb, ru) = _common_best(_targets(runs, experiment), [b, u])
            if t is not None:
                xb, xu = _total_at(b, "local_steps", rb), _total_at(u, "local_steps", ru)
                text += f", steps to {_pct(t)} {_fmt_big(xb)} vs {_fmt_big(xu)}"
            parts.append(text)
            verdicts.append(abs(ratio * c - 1) <= 0.10)
        if not verdicts:
            return None, "runs missing (or no local_steps in the metrics)"
        return all(verdicts), "; ".join(parts)

    return check


# ----------------------------------------------------------------------------------------------
# Tables A1-A2: six methods, 15% / 65% participation
# ----------------------------------------------------------------------------------------------


def _a1_groups(runs: list[Run], split: Mapping[str, Any], c: float) -> dict[str, list[Run]]:
    where = _cell(split, None, c)
    groups = {label: pick(runs, {**where, **_algo(name)}) for label, name in A1_BASELINES.items()}
    groups["FedUmf"] = _umf(runs, where, 1.0, PAPER_UMF)
    groups["FedUMF alone"] = _umf(runs, where, 1.0)
    return groups


def _a1_best_final(c: float) -> Check:
    """Table A1: FedUmf (FedUMF + FedDC) has the highest final test accuracy of the six methods, every split."""

    def check(runs: list[Run]) -> tuple[bool | None, str]:
        parts, verdicts = [], []
        for name, split in A1_SPLITS.items():
            groups = _a1_groups(runs, split, c)
            finals = {k: _final(g) for k, g in groups.items() if k != "FedUMF alone" and g}
            if "FedUmf" not in finals or len(finals) < 2 or None in finals.values():
                continue
            others = {k: v for k, v in finals.items() if k != "FedUmf"}
            best = max(others, key=others.get)  # type: ignore[arg-type]
            parts.append(f"{name}: FedUmf {finals['FedUmf']:.4f}, best other {best} {others[best]:.4f}")
            verdicts.append(finals["FedUmf"] >= others[best])
        return overall(verdicts, "; ".join(parts))

    return check


def _a2_fewest_rounds(c: float) -> Check:
    """Table A2: FedUmf reaches the target in no more rounds than any other method, every split."""

    def check(runs: list[Run]) -> tuple[bool | None, str]:
        target = A2_TARGET.get(str(_dataset(runs)))
        if target is None:
            return None, f"no Table A2 target for dataset {_dataset(runs)}"
        parts, verdicts = [], []
        for name, split in A1_SPLITS.items():
            groups = {k: g for k, g in _a1_groups(runs, split, c).items() if k != "FedUMF alone" and g}
            if "FedUmf" not in groups or len(groups) < 2:
                continue
            rounds = {k: _rounds(g, target) for k, g in groups.items()}
            parts.append(f"{name}: " + ", ".join(f"{k} {_fmt_r(r)}" for k, r in rounds.items()))
            mine = rounds["FedUmf"]
            others = [r for k, r in rounds.items() if k != "FedUmf"]
            if mine is None and all(r is None for r in others):
                verdicts.append(None)
            else:
                verdicts.append(mine is not None and all(r is None or mine <= r for r in others))
        return overall(verdicts, f"rounds to {_pct(target)}: " + "; ".join(parts))

    return check


def _a2_sooner(methods: Sequence[str], baseline: str = "FedAvg", strict: bool = True) -> Check:
    """Table A2: each of ``methods`` reaches the target sooner (``strict``; else no later) than ``baseline``
    in every setting."""

    def check(runs: list[Run]) -> tuple[bool | None, str]:
        target = A2_TARGET.get(str(_dataset(runs)))
        if target is None:
            return None, f"no Table A2 target for dataset {_dataset(runs)}"
        parts, verdicts = [], []
        for c in _values(runs, "train.client_fraction"):
            for name, split in A1_SPLITS.items():
                groups = _a1_groups(runs, split, c)
                if not groups[baseline] or not all(groups[m] for m in methods):
                    continue
                rb = _rounds(groups[baseline], target)
                rs = {m: _rounds(groups[m], target) for m in methods}
                parts.append(f"{c:.0%} {name}: {baseline} {_fmt_r(rb)}, "
                             + ", ".join(f"{m} {_fmt_r(r)}" for m, r in rs.items()))
                if rb is None and all(r is None for r in rs.values()):
                    verdicts.append(None)
                else:
                    verdicts.append(all(r is not None and (rb is None or r < rb or (not strict and r == rb))
                                        for r in rs.values()))
        return overall(verdicts, f"rounds to {_pct(target)}: " + "; ".join(parts))

    return check


def _a1_fedprox_like_fedavg(tolerance: float = 0.005) -> Check:
    """Table A1: FedProx with μ = 1e-4 ends within half a point of FedAvg in every setting."""

    def check(runs: list[Run]) -> tuple[bool | None, str]:
        parts, verdicts = [], []
        for c in _values(runs, "train.client_fraction"):
            for name, split in A1_SPLITS.items():
                groups = _a1_groups(runs, split, c)
                fa, fp = _final(groups["FedAvg"]), _final(groups["FedProx"])
                if fa is None or fp is None:
                    continue
                parts.append(f"{c:.0%} {name}: {fa:.4f} vs {fp:.4f}")
                verdicts.append(abs(fa - fp) <= tolerance)
        return overall(verdicts, "final test accuracy FedAvg vs FedProx: " + "; ".join(parts))

    return check


def _a1_cost(experiment: str) -> Check:
    """FedUmf (FedUMF + FedDC) against FedDC: the same upload bytes in total, 1/C times the local steps."""

    def check(runs: list[Run]) -> tuple[bool | None, str]:
        verdicts, parts = [], []
        for name, split in A1_SPLITS.items():
            for kind, check_of in (
                ("upload", _communication(experiment, split, base="feddc", umf=PAPER_UMF, to_target=False)),
                ("compute", _computation(experiment, split, base="feddc", umf=PAPER_UMF)),
            ):
                verdict, numbers = check_of(runs)
                if numbers.startswith("runs missing"):
                    continue
                parts.append(f"{name} {kind}: {numbers}")
                verdicts.append(verdict)
        return overall(verdicts, "FedDC vs FedUmf — " + " | ".join(parts))

    return check


def _a1_claims(experiment: str, where: str, dyn_dc_strict: bool) -> list[Claim]:
    claims = []
    for c in (0.15, 0.65):
        claims.append(Claim(
            f"FedUmf (FedUMF + FedDC) ends with the highest test accuracy of FedAvg, FedProx, SCAFFOLD, FedDyn, "
            f"FedDC and FedUmf on IID, unbalanced and Dirichlet-0.6 data, {c:.0%} participation ({where}, Table A1)",
            experiment, _a1_best_final(c)))
        claims.append(Claim(
            f"FedUmf reaches the Table A2 target in the fewest rounds of the six methods in every split, "
            f"{c:.0%} participation ({where}, Table A2)", experiment, _a2_fewest_rounds(c)))
    claims += [
        Claim(f"FedDyn and FedDC reach the Table A2 target {'sooner than' if dyn_dc_strict else 'no later than'} "
              f"FedAvg in every setting ({where}, Table A2)",
              experiment, _a2_sooner(("FedDyn", "FedDC"), strict=dyn_dc_strict)),
        Claim(f"FedProx (μ = 1e-4) is indistinguishable from FedAvg: final accuracy within 0.5 points in every "
              f"setting ({where}, Table A1)", experiment, _a1_fedprox_like_fedavg()),
        Claim(f"FedUMF alone (without FedDC) reaches the Table A2 target sooner than FedAvg in every setting "
              f"(Section 5's claim in Appendix A's setting, {where})", experiment, _a2_sooner(("FedUMF alone",))),
        Claim(f"Cost of FedUmf against FedDC: the same bytes uploaded a round (the paper: no extra communication), "
              f"1/C times the local steps ({where})", experiment, _a1_cost(experiment)),
    ]
    return claims


# ----------------------------------------------------------------------------------------------
# The claims
# ----------------------------------------------------------------------------------------------


def _table_claims(experiment: str, split: Mapping[str, Any], kind: str, table: str) -> list[Claim]:
    claims = [
        Claim(f"FedUMF reaches every target accuracy no later than FedAvg, some sooner ({kind}, η = {lr:g}, "
              f"C = {c:g}; {table})", experiment, _no_later(experiment, split, lr, c))
        for lr in (0.01, 0.05) for c in (0.1, 0.5)
    ]
    claims += [
        Claim(f"A larger C leaves a smaller gap: FedUMF's speed-up over FedAvg is larger at C = 0.1 than at "
              f"C = 0.5 ({kind}, η = {lr:g})", experiment, _gap_shrinks_with_c(experiment, split, lr))
        for lr in (0.01, 0.05)
    ]
    claims += [
        Claim(f"After T rounds FedUMF's test accuracy is above FedAvg's in every (η, C) cell ({kind}, "
              f"the curves of {table})", experiment, _final_higher(split)),
        Claim(f"FedUMF uploads the same bytes a round as FedAvg, so it reaches the target with less upload "
              f"traffic ({kind}; the paper: no extra communication)", experiment, _communication(experiment, split)),
        Claim(f"FedUMF's price: every client trains every round, 1/C times FedAvg's local steps ({kind}; "
              f"total and to the highest target both reach)", experiment, _computation(experiment, split)),
    ]
    return claims


CLAIMS = [
    *_table_claims("table1_iid", IID, "IID", "Table 1, Figs. 3-4"),
    Claim("FedUMF needs 34-48% fewer rounds than FedAvg to reach the highest target both reach (IID, η = 0.01, "
          "both C; Table 1: 103→55 and 101→66 rounds to 96%; agreeing within 30-55%)",
          "table1_iid", _fewer_rounds_band("table1_iid", IID, 0.01, 0.30, 0.55)),
    *_table_claims("table2_noniid", NONIID, "non-IID", "Table 2, Figs. 5-6"),
    *[Claim(f"As α increases performance becomes better: α = 0.1 < 0.5 < 1 in mean test accuracy over the run "
            f"(IID, C = {c:g}; Figs. 3-4)", "fig_alpha", _alpha_order("fig_alpha", IID, c)) for c in (0.1, 0.5)],
    Claim("FedUMF (α = 1) reaches every target no later than FedAvg in all four (η, C) cells (CIFAR-10 IID, "
          "ResNet-18, Table 3)", "tables3_4", _all_cells_no_later("tables3_4", IID, 1.0)),
    Claim("FedUMF (α = 0.5) reaches every target no later than FedAvg in all four (η, C) cells (CIFAR-10 "
          "non-IID, Table 4)", "tables3_4", _all_cells_no_later("tables3_4", NONIID, 0.5)),
    Claim("When C increases the benefit diminishes: speed-up larger at C = 0.1 than at C = 0.5 for each η "
          "(CIFAR-10 IID, Table 3)", "tables3_4", _gap_shrinks_with_c("tables3_4", IID)),
    Claim("A descending trend as α becomes smaller: α = 0.5 < α = 1 in mean test accuracy (CIFAR-10 IID, both C "
          "and η; Section 5.3.1)", "tables3_4",
          lambda runs: _alpha_pairs(runs, IID)),
    *_a1_claims("tableA1", "MNIST-like, 2NN", dyn_dc_strict=True),
    # on CIFAR-10 at 65% Table A2 has ties (unbalanced: FedAvg, FedDyn and FedDC all 50 rounds)
    *_a1_claims("tableA1_cifar", "CIFAR-10, FedDC's CNN", dyn_dc_strict=False),
]

