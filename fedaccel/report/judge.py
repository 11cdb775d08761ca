"""``fedaccel judge``: a user's own claims about a grid, judged by the reproductions' procedure.

An experiment file may hold a ``claims:`` section (and ``tuning_seeds:`` for claims that pick a best
value)::

    claims:
      - text: BHerd reaches 80% in fewer rounds than FedAvg
        a: {algorithm: bherd}             # config values by dotted key; the seeds pair a with b
        b: {algorithm: fedavg}
        measure: {rounds_to: 0.8}         # or mean_train_loss, final_test_acc, {final: test_acc}, ...
        expect: less                      # less, greater or equal
      - text: Reshuffling does not change the final accuracy
        a: {train.order: reshuffle}
        b: {train.order: fixed}
        measure: final_test_acc
        expect: equal
        margin: 0.01                      # required for equal, in the measure's units
        why: one point of accuracy is within the run-to-run noise the paper reports
        detect: 0.005                     # --plan: the true difference a - b to plan for (default: the pilot's mean)
      - text: The mean of the client models scores as well as the broadcast model
        a: {algorithm: feddyn}            # a and b may be the same runs, measured two ways:
        b: {algorithm: feddyn}
        measure: final_client_mean/test_acc
        b_measure: final_test_acc         # b's measure (default: measure)
        expect: equal
        margin: 0.01
        why: ...
      - text: ...                         # a claim written after the runs had been seen says when and why:
        added: after the first verdicts   # it forms its own Benjamini-Hochberg family, and its row says so
    looks: [[0, 1, 2, 3, 4]]              # seeds raised after a look at verdicts: the seeds run before each
                                          # look; rows then combine their stages' tests (docs/raised-seeds.md)

:func:`check_claims` fits them to the grid when the experiment is loaded, :func:`gather` finds the
grid's runs and the incomplete cells each claim depends on (:mod:`fedaccel.report.completeness`),
:func:`judge_grid` judges them on the grid's runs (:func:`fedaccel.report.claims.judge_family`) and
:func:`plan` says how many seeds each claim needs for 80% power, from a pilot grid.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedaccel.errors import ConfigError, listed, nearest_names, spelled
from fedaccel.report.claims import (
    ABSENT,
    BEST,
    EXPECTATIONS,
    MIN_TUNING_SEEDS,
    PLANNED_PAIRS,
    SPENT,
    Claim,
    Judgement,
    Measure,
    Raised,
    at,
    final,
    judge,
    judge_family,
    mean_over_rounds,
    rounds_to,
    run_selects,
    selects,
    spent_bound,
    within_budget,
)
from fedaccel.report.completeness import Gap, gaps_line, grid_gaps
from fedaccel.report.identity import check_identity
from fedaccel.runs.names import value_name, values_named
from fedaccel.report.reading import Run
from fedaccel.report.statistics import seeds_for_equivalence, seeds_for_power

CLAIM_KEYS = {"text", "a", "b", "measure", "b_measure", "expect", "margin", "why", "value", "detect", "paper", "added"}
CLAIMS_FILE = "claims.json"


def parse_measure(spec: Any, where: str) -> Measure:
    """A measure from its YAML form: ``{rounds_to: 0.8}`` (``metric:`` optional), ``mean_<metric>``,
    ``final_<metric>``, ``{mean_over_rounds: <metric>}`` or ``{final: <metric>}``."""
    if isinstance(spec, str):
        for prefix, make in (("mean_", mean_over_rounds), ("final_", final)):
            if spec.startswith(prefix) and len(spec) > len(prefix):
                return make(spec[len(prefix):])
    if isinstance(spec, Mapping):
        if "rounds_to" in spec and set(spec) <= {"rounds_to", "metric"}:
            target, metric = spec["rounds_to"], str(spec.get("metric", "test_acc"))
            if isinstance(target, (int, float)) and not isinstance(target, bool):
                if not math.isfinite(target) or target < 0:  # a target no metric reaches: every run "never"
                    raise ConfigError(f"{where}: rounds_to {target:g} is not a target a run can reach (a finite "
                                      "number, 0 or more)")
                if metric.rpartition("/")[2].endswith("_acc") and not 0.0 <= target <= 1.0:  # 90: a percentage
                    hint = f" (as a fraction: {{rounds_to: {target / 100:g}}})" if 1.0 < target <= 100.0 else ""
                    raise ConfigError(f"{where}: rounds_to {target:g} is not an accuracy between 0 and 1 ({metric}){hint}")
                return rounds_to(float(target), metric)
        if len(spec) == 1 and "mean_over_rounds" in spec:
            return mean_over_rounds(str(spec["mean_over_rounds"]))
        if len(spec) == 1 and "final" in spec:
            return final(str(spec["final"]))
    raise ConfigError(f"{where}: measure must be {{rounds_to: TARGET}}, mean_<metric> (e.g. mean_train_loss), "
                      f"final_<metric> (e.g. final_test_acc), {{mean_over_rounds: METRIC}} or {{final: METRIC}}; "
                      f"got {str(spec)[:80]!r}")


def parse_claims(entries: Any, experiment: str, source: str) -> list[Claim]:
    """The claims of an experiment file's ``claims:`` section; one-line errors name the entry."""
    if not isinstance(entries, list):
        raise ConfigError(f"{source}: claims must be a list of claims")
    claims = []
    for k, entry in enumerate(entries):
        where = f"{source}: claims[{k}]"
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{where} must be a mapping with text, a, b, measure and expect")
        unknown = sorted(set(entry) - CLAIM_KEYS)
        if unknown:
            raise ConfigError(f"{where}: unknown key {unknown[0]!r}; known: {', '.join(sorted(CLAIM_KEYS))}")
        missing = [key for key in ("text", "a", "measure", "expect") if key not in entry]
        if missing:
            raise ConfigError(f"{where}: {missing[0]} is missing")
        for side in ("a", "b"):
            if side in entry and not isinstance(entry[side], Mapping):
                raise ConfigError(f"{where}: {side} must map config keys to values, e.g. {{algorithm: fedavg}}")
            if side in entry and SPENT in entry[side]:
                spent_bound(entry[side][SPENT], f"{where}: {side}")
        if entry["expect"] not in EXPECTATIONS:
            raise ConfigError(f"{where}: expect must be one of {', '.join(EXPECTATIONS)}, not {entry['expect']!r}")
        margin = entry.get("margin", 0.0)
        if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not margin >= 0:
            raise ConfigError(f"{where}: margin must be a number >= 0 in the measure's units")
        if entry["expect"] == "equal" and not (margin > 0 and str(entry.get("why", "")).strip()):
            raise ConfigError(f"{where}: a claim of no difference (expect: equal) needs a margin > 0 in the measure's "
                              "units and why that difference would not matter (why: ...)")
        if "b_measure" in entry and "b" not in entry:
            raise ConfigError(f"{where}: b_measure measures b's runs: give b")
        if "b" not in entry and "value" not in entry:
            raise ConfigError(f"{where}: give b (the setup compared with) or value (a constant)")
        claims.append(Claim(str(entry["text"]), experiment, dict(entry["a"]),
                            dict(entry["b"]) if "b" in entry else None, parse_measure(entry["measure"], where),
                            entry["expect"], str(entry.get("paper", "")), float(margin),
                            float(entry.get("value", 0.0)), detect=_number(entry.get("detect"), where, "detect"),
                            measure_b=parse_measure(entry["b_measure"], where) if "b_measure" in entry else None,
                            added=str(entry.get("added") or "")))
    return claims


def _number(value: Any, where: str, key: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where}: {key} must be a number in the measure's units")
    return float(value)


def claims_from_file(path: Path) -> tuple[list[Claim], tuple[Any, ...], Path]:
    """An experiment file's claims, tuning seeds and output folder, without building its grid (so the
    copy beside the runs reads even where its ``base:`` path does not resolve)."""
    from fedaccel.runs.config import read_yaml

    raw = read_yaml(path)
    name = str(raw.get("name") or path.stem)
    claims = parse_claims(raw["claims"], name, str(path)) if "claims" in raw else []
    tuning = raw.get("tuning_seeds") or []
    if not isinstance(tuning, list):
        raise ConfigError(f"{path}: tuning_seeds must be a list of seeds")
    return claims, tuple(tuning), Path(raw.get("out_dir") or Path("runs") / name)


def looks_from_file(path: Path) -> Raised | None:
    """An experiment file's ``looks:``, where its seeds were raised after looks at verdicts: the seeds run
    before each look (a list of lists; every later seed is the last stage), and optionally ``looks_cap``, the
    most judged pairs the raising aimed at, fixed before the later stages (default: that of ``--plan``).
    Each row is then judged by the inverse-normal combination of its stages' own tests (docs/raised-seeds.md)."""
    from fedaccel.runs.config import read_yaml

    raw = read_yaml(path)
    looks = raw.get("looks")
    if looks is None:
        return None
    shape = f"{path}: looks must be a list of lists of seeds, the seeds run before each look at verdicts"
    if isinstance(looks, Mapping):
        cap, looks = looks.get("cap", PLANNED_PAIRS), looks.get("seeds")
    else:
        cap = PLANNED_PAIRS
    if not isinstance(looks, list) or not looks or not all(isinstance(s, list) and s for s in looks):
        raise ConfigError(shape + f", got {spelled(looks)}")
    seen = [seed for stage in looks for seed in stage]
    if len(set(map(repr, seen))) != len(seen) or not all(isinstance(s, (int, str)) and not isinstance(s, bool)
                                                         for s in seen):
        raise ConfigError(shape + ", each seed (an integer or a name) in one stage only")
    if isinstance(cap, bool) or not isinstance(cap, int) or cap <= len(seen):
        raise ConfigError(f"{path}: looks.cap (the most judged pairs the raising aimed at) must be an integer above "
                          f"the {len(seen)} seeds of the looks, got {spelled(cap)}")
    counts, total = [], 0
    for stage in looks:
        total += len(stage)
        counts.append(str(total))
    return Raised("looks at " + " and ".join(counts) + " seeds", tuple(tuple(stage) for stage in looks), cap)


Cell = tuple[str, Mapping[str, Any], Mapping[str, Any] | None]  # folder name, spec as spelled, resolved config


def check_claims(claims: Sequence[Claim], cells: Sequence[Cell], source: str) -> None:
    """Every claim fits the grid before anything runs: each key of a side is a config key, each side
    selects at least one cell (as the experiment file spells it or as resolved; see
    :func:`fedaccel.report.claims.selects`), and each measure names a column the runs will have. A cell
    not run yet (config None) is matched on the values its grid spells; one line names the nearest."""
    if not cells:
        return
    keys = sorted({path for _, spec, config in cells for m in (spec, config) if m for path in _paths(m)})
    for k, claim in enumerate(claims):
        where = f"{source}: claims[{k}]"
        for side, setup in (("a", claim.a), ("b", claim.b)):
            for key in setup or {}:
                if key not in keys and key != SPENT:
                    raise ConfigError(f"{where}.{side}: {key!r} is not a config key of this grid; nearest: "
                                      f"{listed(keys, near=key)}")
            if setup is not None and not any(selects(setup, spec, config, unknown=True) for _, spec, config in cells):
                raise ConfigError(f"{where}.{side} selects no cell of the grid: {_no_cell(setup, cells)}")
            if setup is not None:
                _one_cell_per_seed(setup, cells, f"{where}.{side}")
        for measure in [claim.measure] + ([claim.measure_b] if claim.measure_b is not None else []):
            _check_column(measure, cells, where)


def _one_cell_per_seed(setup: Mapping[str, Any], cells: Sequence[Cell], where: str) -> None:
    """A side selects at most one cell per seed (per value of its ``best`` keys): two would be paired by
    whichever came last. One line names the keys that tell them apart."""
    seen: dict[str, Cell] = {}
    for cell in cells:
        _, spec, config = cell
        if not selects(setup, spec, config, unknown=True) or not _surely_in_budget(setup, spec, config):
            continue
        seed = _value(cell, "run.seed")
        key = spelled([seed, *(_value(cell, k) for k, v in setup.items() if v == BEST)])
        if key in seen:
            apart = _apart(seen[key], cell)
            raise ConfigError(f"{where} selects two cells of seed {spelled(seed)}, {seen[key][0]} and {cell[0]}: "
                              f"add {listed(apart)} to it (one run per seed, or no pairing is meant)")
        seen[key] = cell


def _surely_in_budget(setup: Mapping[str, Any], spec: Mapping[str, Any] | None,
                      config: Mapping[str, Any] | None) -> bool:
    """Whether a cell not yet run is known to be within a side's ``epsilon`` bound: a noise multiplier's epsilon is
    known only after the run (judge then refuses a side with two runs of a seed)."""
    return SPENT not in setup or within_budget(spent_bound(setup[SPENT], "claim"), None, spec, config, False)


def _value(cell: Cell, key: str) -> Any:
    got = at(cell[2], key)
    return at(cell[1], key) if got is ABSENT else got


def _apart(one: Cell, other: Cell) -> list[str]:
    """The dotted keys (leaves, as spelled, else as resolved) whose values differ between two cells."""
    from fedaccel.report.identity import varied_keys

    spelled_apart = varied_keys([c for c in (one[1], other[1]) if c is not None]) if one[1] and other[1] else []
    return spelled_apart or varied_keys([c for c in (one[2], other[2]) if c is not None]) or ["the key that differs"]


def _paths(mapping: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Every dotted path of a nested mapping, sections included (``data``, ``data.split``, ...)."""
    out = []
    for key, value in mapping.items():
        out.append(path := f"{prefix}{key}")
        if isinstance(value, Mapping):
            out += _paths(value, path + ".")
    return out


def _no_cell(setup: Mapping[str, Any], cells: Sequence[Cell]) -> str:
    """Which value of ``setup`` no cell has, and the grid's nearest values for that key."""
    for key, want in setup.items():
        if not any(selects({key: want}, spec, config, unknown=True) for _, spec, config in cells):
            if key == SPENT:
                return f"no cell has algorithm.dp with a target_epsilon (or noise_multiplier) within {want}"
            values: list[str] = []  # as the grid spells them, else as resolved (a method by its display name)
            for _, spec, config in cells:
                got = at(spec, key)
                got = at(config, key) if got is ABSENT else got
                if got is not ABSENT and value_name(key, got) not in values:
                    values.append(value_name(key, got))
            nearest = listed(nearest_names(value_name(key, want), values))
            return f"{key}: {value_name(key, want)} is none of its values; nearest: {nearest}"
    return f"no cell has {values_named(dict(setup))} together"


#: Every metrics row's columns besides the scored models' (fedaccel.runs.loop._metrics); a dotted
#: metric names a nested entry (a diagnostic), which depends on the algorithm and is not checked.
ROUND_COLUMNS = ("wall_s", "bytes_up", "bytes_down", "local_steps", "clients", "uploaded", "round_bytes_up",
                 "round_bytes_down", "round_local_steps")
SCORES = ("test_acc", "test_loss", "train_acc", "train_loss")  # per scored model (Federation.evaluate)


def _check_column(measure: Measure, cells: Sequence[Cell], where: str) -> None:
    from fedaccel.engine.evaluated import column

    configs = [config for _, _, config in cells if config is not None]
    if not configs or "." in measure.metric:
        return
    columns = list(ROUND_COLUMNS)
    for config in configs:
        models = at(config, "eval.models")
        for model in models if isinstance(models, list) else ["broadcast"]:
            columns += [c for c in (column(str(model), s) for s in SCORES) if c not in columns]
    if measure.metric not in columns:
        raise ConfigError(f"{where}: the measure {measure.name!r} reads {measure.metric!r}, a column the runs will "
                          f"not have; nearest: {listed(columns, near=measure.metric)}")


def judge_grid(claims: Sequence[Claim], runs: Sequence[Run], tuning_seeds: Sequence[Any] = (),
               raised: Raised | None = None) -> list[Judgement]:
    """Every claim on the grid's runs, decided together (BH over the claims given); ``raised``: the file's
    ``looks:`` (:func:`looks_from_file`), its rows then judged by the combination of their stages' tests."""
    for claim in claims:
        tunes = any(v == BEST for side in (claim.a, claim.b or {}) for v in side.values())
        if tunes and len(tuning_seeds) < MIN_TUNING_SEEDS:
            raise ConfigError(f"claim {claim.text!r} picks a best value: list at least {MIN_TUNING_SEEDS} tuning_seeds "
                              f"in the experiment file (seeds used only to pick it, never judged), not "
                              f"{len(tuning_seeds)}")
    return judge_family([judge(claim, runs, tuning_seeds, raised) for claim in claims])


@dataclass
class Evidence:
    """A grid folder's runs (those of its cells), the cells that are not complete evidence (``total``: of
    how many) and, per claim, the incomplete cells it depends on."""

    folder: Path
    runs: list[Run]
    gaps: list[Gap]
    total: int
    depends: list[list[str]]  # per claim: the incomplete cells its sides select

    def refusal(self) -> str:
        """Why the claims that depend on incomplete cells cannot be judged, in one line."""
        n = sum(bool(d) for d in self.depends)
        return (f"{self.folder}: {gaps_line(self.gaps, self.total)}; {n} of {len(self.depends)} claims depend on "
                "them: finish the grid (running its experiment again resumes it) or judge the complete pairs only "
                "with --partial")

    def complete(self) -> list[Run]:
        """The runs that are complete evidence (a diverged run counts as its whole budget)."""
        left_out = {gap.cell for gap in self.gaps}
        return [run for run in self.runs if run.path.name not in left_out]


def gather(folder: Path, claims: Sequence[Claim], source: str,
           cells: Sequence[tuple[str, Mapping[str, Any]]] | None) -> Evidence:
    """The runs in ``folder`` of the grid ``cells`` (every run folder there when None), the claims checked
    against the grid (:func:`check_claims`), and the incomplete cells each claim depends on."""
    from fedaccel.report.reading import check_installed, load_runs

    runs = load_runs(folder)
    specs = dict(cells) if cells is not None else {}
    if cells is not None:
        runs = [run for run in runs if run.path.name in specs]  # not a folder left by another grid
        for run in runs:
            run.spec = dict(specs[run.path.name])
    check_installed(runs)  # a verdict on a plugin's method is for the version that made the runs
    check_identity(cells, runs)
    configs = {run.path.name: run.config for run in runs}
    check_claims(claims, [(name, spec, configs.get(name)) for name, spec in (cells or [])] or
                 [(run.path.name, None, run.config) for run in runs], source)
    gaps, total = grid_gaps(folder, cells, runs)
    depends = [[gap.cell for gap in gaps
                if any(side is not None and selects(side, specs.get(gap.cell), configs.get(gap.cell), unknown=True)
                       for side in (claim.a, claim.b))] for claim in claims]
    return Evidence(folder, runs, gaps, total, depends)


def table(judgements: Sequence[Judgement], left_out: Sequence[Sequence[str]] = ()) -> str:
    """A Markdown table of the judged claims; ``left_out``: per claim, the incomplete cells ``--partial`` left out."""
    from fedaccel.report.claims import numbers

    lines = ["| claim | measure | verdict | measured (a − b with its 95% interval, exact p, BH q) |", "|---|---|---|---|"]
    for k, j in enumerate(judgements):
        cells = left_out[k] if k < len(left_out) else []
        partial = f"; partial: complete pairs only, {len(cells)} incomplete cell(s) left out: {listed(cells)}"
        partial = partial if cells else ""
        lines.append(f"| {j.claim.text} | {j.claim.measure.name} | **{j.verdict}** | {numbers(j)}{partial} |")
    return "\n".join(lines)


def claims_json(judgements: Sequence[Judgement], left_out: Sequence[Sequence[str]] = (),
                runs: Sequence[Run] = ()) -> str:
    """The text of ``claims.json``: every judgement at full precision; a claim judged on complete pairs only
    lists the cells left out (``left_out``); a claim whose sides select ``runs`` made with plugins lists
    those plugins (:func:`claim_plugins`)."""
    rows = [j.as_dict() | ({"partial": True, "left_out": list(left_out[k])} if k < len(left_out) and left_out[k]
                           else {}) | ({"plugins": used} if (used := claim_plugins(j.claim, runs)) else {})
            for k, j in enumerate(judgements)]
    return json.dumps(rows, indent=1, ensure_ascii=False) + "\n"


def claim_plugins(claim: Claim, runs: Sequence[Run]) -> list[dict[str, str]]:
    """The plugins (kind, name, distribution, version, entry point, module hash) that made the runs either
    side of ``claim`` selects, as their ``config.yaml`` records them; sorted, each once."""
    used = {json.dumps({"kind": kind, **record}, sort_keys=True)
            for run in runs if any(side is not None and run_selects(side, run)
                                   for side in (claim.a, claim.b))
            for kind, record in run.plugins.items()}
    return [json.loads(text) for text in sorted(used)]


def write_claims(judgements: Sequence[Judgement], grid_dir: Path, left_out: Sequence[Sequence[str]] = (),
                 claims_file: Path | None = None, runs: Sequence[Run] = ()) -> Path:
    """``claims.json`` (:func:`claims_json`) beside the grid's runs, written atomically (temp file, fsync,
    rename); claims from another file (``--claims FILE``) go beside that file, as ``FILE-stem.claims.json``,
    never over the grid's."""
    from fedaccel.runs.files import write_atomic

    out = grid_dir / CLAIMS_FILE if claims_file is None else claims_file.parent / f"{claims_file.stem}.{CLAIMS_FILE}"
    write_atomic(out, claims_json(judgements, left_out, runs))
    return out


def plan(claims: Sequence[Claim], runs: Sequence[Run], tuning_seeds: Sequence[Any] = (),
         power: float = 0.8) -> list[dict[str, Any]]:
    """Per claim, from a pilot grid: see :func:`plan_rows`."""
    return plan_rows(judge_grid(claims, runs, tuning_seeds), power)


def plan_rows(judgements: Sequence[Judgement], power: float = 0.8) -> list[dict[str, Any]]:
    """Per judged claim of a pilot: its pairs, the difference to detect, the pilot's standard deviation of the
    differences, and the seeds needed for ``power`` by the test its verdict uses (None: more than 1,000, or no
    effect to detect). The true difference a - b is the claim's ``detect``, else the pilot's mean difference;
    what is to be detected is its distance from what the verdict tests: from the margin of a directional claim
    (``a - b < -margin`` for less, ``> margin`` for greater; 0 without one), and for ``equal`` the room left inside
    the margin. The power is the sign-flip test's (the t test's, near enough) for a mean, the sign test's for a
    median beyond its margin, and TOST's by sign tests for ``equal``, under normal differences of that mean and sd."""
    rows = []
    for j in judgements:
        d = np.asarray(j.differences, dtype=float)
        truth = j.claim.detect if j.claim.detect is not None else float(d.mean()) if d.size else 0.0
        sd = float(d.std(ddof=1)) if d.size > 1 else float("nan")
        equal = j.claim.expect == "equal"
        centre = 0.0 if equal else _centre(j.claim)
        effect = j.claim.margin - abs(truth) if equal else truth - centre
        outside = equal and effect <= 0  # no number of seeds shows a difference inside the margin
        against = _against(j.claim, effect)  # more seeds would only show the other way better
        needed = None
        if d.size > 1 and np.isfinite(sd) and not outside and not against:
            needed = (seeds_for_equivalence(truth, sd, j.claim.margin, power=power) if equal else
                      seeds_for_power(effect, sd, power=power, median=j.estimand == "median"))
        rows.append({"text": j.claim.text, "measure": j.claim.measure.name, "pilot_seeds": j.seeds,
                     "effect": effect, "sd": sd, "seeds_needed": needed, "equal": equal, "centre": centre,
                     "test": "TOST" if equal else j.estimand, "outside": outside, "against": against})
    return rows


def _centre(claim: Claim) -> float:
    """What a directional claim's verdict tests a - b against: ``-margin`` for less, ``+margin`` for greater (the
    sign test of the median there, :func:`fedaccel.report.claims.claim_test`); 0 without a margin."""
    return -claim.margin if claim.expect == "less" else claim.margin


def _against(claim: Claim, effect: float) -> bool:
    """The difference to detect (from the tested centre: 0, or the margin) points against the claim's direction
    (above it for ``less``, below for ``greater``): no number of seeds is planned for it (a user was asked for 9
    seeds "to detect" an effect whose pilot lay on the other side of 0; another for 6 where the pilot's difference,
    -1.5, fell short of the claimed margin, -1.6)."""
    return (claim.expect == "less" and effect > 0) or (claim.expect == "greater" and effect < 0)


def plan_table(rows: Sequence[Mapping[str, Any]], power: float = 0.8, raised: bool = False) -> str:
    """The plan as a Markdown table, with a note for each kind of row it holds (``raised``: the grid's seeds were
    raised after a look, :data:`RAISED_PLAN_NOTE`)."""
    lines = [f"| claim | measure | pilot seeds | difference to detect | sd of the differences | seeds for "
             f"{power:.0%} power |", "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        needed = (r["seeds_needed"] if r["seeds_needed"] is not None else
                  "— (the pilot's difference is outside the margin)" if r.get("outside") else
                  "— (the pilot seeds lean the other way: more seeds would not show the claim)" if r.get("against") else
                  "— (no effect, or > 1000)")
        beyond = f" (beyond the margin, {r['centre']:+.4g})" if r.get("centre") else ""
        effect = f"{r['effect']:.4g}" + (" (room in the margin)" if r.get("equal") else beyond)
        lines.append(f"| {r['text']} | {r['measure']} | {r['pilot_seeds']} | {effect} | {r['sd']:.4g} | {needed} |")
    if any(r.get("centre") for r in rows):
        lines += ["", MARGIN_PLAN_NOTE]
    if any(r.get("equal") for r in rows):
        lines += ["", EQUAL_PLAN_NOTE]
    if raised:
        lines += ["", RAISED_PLAN_NOTE]
    return "\n".join(lines)


MARGIN_PLAN_NOTE = ("Beyond the margin (a claim that a − b lies below −margin, `less`, or above +margin, `greater`): "
                    "the true difference (`detect:`, else the pilot's mean) less that centre, which the verdict's sign "
                    "test of the median tests against; the seeds are those with which it shows the claim (normal "
                    "differences with the pilot's sd). On the wrong side of the centre no number of seeds would show "
                    "the claim, if the pilot is right.")
RAISED_PLAN_NOTE = ("This grid's seeds were raised after a look (`looks:`): its verdicts combine their stages' own "
                    "tests, and the counts above are for a grid of that many seeds fixed before it ran. Seeds added to "
                    "this one form the last stage, which carries the weight the cap leaves (w² = 1 − 6/20 = 0.7 after "
                    "a look at 6 seeds), so a last stage of one or two seeds can rarely decide: raise by several "
                    "(docs/raised-seeds.md).")
EQUAL_PLAN_NOTE = ("Room in the margin (a claim of no difference, `expect: equal`): the margin less the |true difference| "
                   "(`detect:`, else the pilot's mean), the distance the equivalence test (TOST by sign tests) must tell "
                   "from the margin's edge; the seeds are those with which that test shows it (normal differences with "
                   "the pilot's sd). Below 0 the pilot's difference lies outside the margin: no number of seeds would "
                   "show the claim, if the pilot is right.")
