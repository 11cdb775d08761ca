"""`fedaccel judge`: a user's claims in the experiment file, judged on the grid's run folders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fedaccel.cli import main
from fedaccel.errors import ConfigError, UserError
from fedaccel.grids.experiment import cell_name, load_experiment

SEEDS = range(6)
LR = {"fast": 0.1, "slow": 0.01, "twin": 0.2, "noisy": 0.3}  # four FedAvg setups, told apart by their rate

CLAIMS = [
    {"text": "fast reaches 0.8 sooner than slow", "a": {"train.lr": LR["fast"]}, "b": {"train.lr": LR["slow"]},
     "measure": {"rounds_to": 0.8}, "expect": "less"},
    {"text": "slow reaches 0.8 sooner than fast", "a": {"train.lr": LR["slow"]}, "b": {"train.lr": LR["fast"]},
     "measure": {"rounds_to": 0.8}, "expect": "less"},
    {"text": "twin ends where fast ends", "a": {"train.lr": LR["twin"]}, "b": {"train.lr": LR["fast"]},
     "measure": "final_test_acc", "expect": "equal", "margin": 0.05, "why": "5 points is the noise of one seed"},
    {"text": "noisy has a lower training loss than fast", "a": {"train.lr": LR["noisy"]}, "b": {"train.lr": LR["fast"]},
     "measure": "mean_train_loss", "expect": "less"},
]


def curve(name: str, seed: int) -> list[float]:
    """Test accuracy at rounds 1..6 of each kind of run (slightly different per seed)."""
    e = 0.002 * seed
    return {
        "fast": [0.5, 0.7, 0.85 + e, 0.9, 0.9, 0.9],  # 0.8 at ~2.7
        "slow": [0.3, 0.4, 0.5, 0.6, 0.75, 0.85 + e],  # 0.8 at ~5.5
        "twin": [0.5, 0.7, 0.85, 0.9, 0.9, 0.9 + 0.01 * (-1) ** seed],
        "noisy": [0.5, 0.7, 0.85, 0.9, 0.9, 0.9],
    }[name]


def write_grid(folder: Path, claims: list[dict]) -> Path:
    for name in ("fast", "slow", "twin", "noisy"):
        for seed in SEEDS:
            run = folder / cell_name({"train.lr": LR[name], "run.seed": seed})  # the grid's own folder names
            run.mkdir(parents=True)
            config = {"name": "", "algorithm": "fedavg", "train": {"lr": LR[name]}, "run": {"seed": seed},
                      "eval": {"every": 1}}
            (run / "config.yaml").write_text(yaml.safe_dump(config))
            loss = [1.0 - a + (0.05 if name == "noisy" and seed % 2 else -0.05 if name == "noisy" else 0.0)
                    for a in curve(name, seed)]
            rows = [{"round": r + 1, "test_acc": a, "train_loss": l, "wall_s": 0.1 * (r + 1) + 0.001 * seed + LR[name]}
                    for r, (a, l) in enumerate(zip(curve(name, seed), loss))]  # a clock of its own per run
            (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
            (run / "summary.json").write_text(json.dumps({"finished": True}))
    experiment = {"name": "toy", "grid": {"train.lr": list(LR.values()), "run.seed": list(SEEDS)}, "claims": claims}
    (folder / "experiment.yaml").write_text(yaml.safe_dump(experiment, sort_keys=False))
    return folder


def test_judge_decides_agrees_disagrees_equivalence_and_inconclusive(tmp_path: Path, capsys) -> None:
    grid = write_grid(tmp_path / "toy", CLAIMS)
    assert main(["judge", str(grid)]) == 0
    printed = capsys.readouterr().out
    judged = json.loads((grid / "claims.json").read_text())
    assert [c["verdict"] for c in judged] == ["agrees", "disagrees", "agrees", "inconclusive"]
    assert "| fast reaches 0.8 sooner than slow |" in printed and "**agrees**" in printed
    first = judged[0]
    assert first["seeds"] == 6 and first["paired_seeds"] == list(SEEDS) and len(first["differences"]) == 6
    assert first["p"] == pytest.approx(2 / 64) and first["q"] >= first["p"] and first["margin"] == 0
    assert judged[2]["margin"] == 0.05 and judged[3]["censored"] == [0, 0] and judged[0]["tuning_seeds"] == []
    assert all(-6 < d < -2 for d in first["differences"])  # interpolated crossings: ~2.7 against ~5.5


def test_judge_plan_prints_the_seeds_each_claim_needs(tmp_path: Path, capsys) -> None:
    grid = write_grid(tmp_path / "toy", CLAIMS[:1] + CLAIMS[3:])
    assert main(["judge", str(grid), "--plan"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| fast") or
             line.startswith("| noisy")]
    needed = [line.rstrip(" |").rsplit("| ", 1)[-1] for line in lines]
    assert needed[0] == "6"  # a huge, steady effect: the exact test's minimum
    assert needed[1].startswith("—")  # the noisy claim's pilot mean difference is zero: nothing to detect


def test_claims_are_checked_when_the_experiment_is_loaded(tmp_path: Path) -> None:
    bad = {**CLAIMS[2]}
    del bad["margin"]
    with pytest.raises(ConfigError, match="needs a margin"):
        load_experiment(write_grid(tmp_path / "a", [bad]) / "experiment.yaml")
    with pytest.raises(ConfigError, match="measure must be"):
        load_experiment(write_grid(tmp_path / "b", [{**CLAIMS[0], "measure": "speed"}]) / "experiment.yaml")
    with pytest.raises(ConfigError, match="unknown key 'expected'"):
        load_experiment(write_grid(tmp_path / "c", [{**CLAIMS[0], "expected": "less"}]) / "experiment.yaml")
    with pytest.raises(ConfigError, match=r"rounds_to 90 is not an accuracy between 0 and 1 \(test_acc\) \(as a "
                                          r"fraction: \{rounds_to: 0.9\}\)"):  # a percentage: judged as never reached
        load_experiment(write_grid(tmp_path / "d", [{**CLAIMS[0], "measure": {"rounds_to": 90}}]) / "experiment.yaml")
    for target in (float("nan"), -0.5):  # on a loss too: judged "never" on every run
        with pytest.raises(ConfigError, match="is not a target a run can reach"):
            load_experiment(write_grid(tmp_path / f"e{target}", [
                {**CLAIMS[0], "measure": {"rounds_to": target, "metric": "test_loss"}}]) / "experiment.yaml")


def test_judge_without_claims_is_one_line(tmp_path: Path, capsys) -> None:
    assert main(["judge", str(tmp_path)]) == 2
    assert "no claims to judge" in capsys.readouterr().err


def test_b_measure_compares_two_columns_of_the_same_runs(tmp_path: Path, capsys) -> None:
    """a and b the same setup, measured two ways: the pairs are the same runs, d = m_a(run) - m_b(run)."""
    claim = {"text": "fast's final accuracy exceeds its final loss", "a": {"train.lr": LR["fast"]},
             "b": {"train.lr": LR["fast"]}, "measure": "final_test_acc", "b_measure": "final_train_loss",
             "expect": "greater"}
    grid = write_grid(tmp_path / "toy", [claim])
    assert main(["judge", str(grid)]) == 0
    judged = json.loads((grid / "claims.json").read_text())[0]
    # the last three rounds of fast: accuracy 0.9 and loss 1 - 0.9 = 0.1 on every seed
    assert judged["differences"] == pytest.approx([0.8] * 6)
    assert judged["verdict"] == "agrees" and judged["p"] == pytest.approx(2 / 64)
    assert judged["measure_b"].startswith("final train loss")
    assert "(final train loss" in capsys.readouterr().out  # the table names each side's measure
    with pytest.raises(ConfigError, match="b_measure measures b's runs"):
        load_experiment(write_grid(tmp_path / "bad", [{k: v for k, v in claim.items() if k != "b"}]) / "experiment.yaml")


def test_a_rounds_claim_that_most_runs_never_reach_is_not_decided(tmp_path: Path) -> None:
    """No run reaches 0.95: every seed counts as its last round on both sides, d = 0 on every seed, and
    TOST alone would call that equivalence. More than a third censored: not decided, and out of the family."""
    claim = {"text": "twin reaches 0.95 as soon as fast", "a": {"train.lr": LR["twin"]}, "b": {"train.lr": LR["fast"]},
             "measure": {"rounds_to": 0.95}, "expect": "equal", "margin": 1, "why": "one round of six"}
    grid = write_grid(tmp_path / "toy", [claim])
    assert main(["judge", str(grid)]) == 0
    judged = json.loads((grid / "claims.json").read_text())[0]
    assert judged["differences"] == [0.0] * 6 and judged["censored"] == [6, 6]
    assert judged["verdict"] == "inconclusive" and "no evidence of equal speed" in judged["undecided"]
    assert judged["q"] is None and judged["mde"] is None


def test_claims_json_keeps_full_precision(tmp_path: Path) -> None:
    """Every stored number is the float itself: the differences read back equal the judged ones bit for bit,
    and the p-value recomputed from the file is the stored one (6-decimal rounding broke both)."""
    from fedaccel.report.claims import claim_test
    from fedaccel.report.judge import claims_from_file, judge_grid
    from fedaccel.report.reading import load_runs

    grid = write_grid(tmp_path / "toy", CLAIMS)
    assert main(["judge", str(grid)]) == 0
    stored = json.loads((grid / "claims.json").read_text())
    claims, tuning, _ = claims_from_file(grid / "experiment.yaml")
    runs = load_runs(sorted(p for p in grid.iterdir() if (p / "metrics.jsonl").is_file()))
    judged = judge_grid(claims, runs, tuning)
    assert any(len(repr(d)) > 10 for j in judged for d in j.differences)  # numbers that 6 decimals would cut
    for claim, row, j in zip(claims, stored, judged):
        assert row["differences"] == j.differences and row["effect"] == j.effect and row["p"] == j.p
        assert claim_test(claim, row["differences"])[0] == row["p"]


def folder(grid: Path, name: str, seed: int) -> Path:
    return grid / cell_name({"train.lr": LR[name], "run.seed": seed})


def test_a_folder_holding_another_seeds_run_is_refused_naming_it(tmp_path: Path, capsys) -> None:
    """A folder named seed=2 whose config says seed 1 (a run put in the wrong folder): judge and compare
    refuse it by name, instead of pairing 5 seeds and leaving the lost one unnamed."""
    grid = write_grid(tmp_path / "toy", CLAIMS[:1])
    moved = folder(grid, "fast", 2)
    config = yaml.safe_load((moved / "config.yaml").read_text())
    config["run"]["seed"] = 1
    (moved / "config.yaml").write_text(yaml.safe_dump(config))
    for command in (["judge", str(grid)], ["compare", str(grid)]):
        assert main(command) == 2
        err = capsys.readouterr().err.strip()
        assert str(moved) in err and "run.seed 1" in err and "its cell has 2" in err and len(err.splitlines()) == 1
    assert not (grid / "claims.json").exists()


def test_a_folder_holding_another_setups_run_is_refused(tmp_path: Path, capsys) -> None:
    """The seed right but the varied key wrong (slow's run in fast's folder): refused, naming the key."""
    grid = write_grid(tmp_path / "toy", CLAIMS[:1])
    wrong = folder(grid, "fast", 3)
    config = yaml.safe_load((wrong / "config.yaml").read_text())
    config["train"]["lr"] = LR["slow"]
    (wrong / "config.yaml").write_text(yaml.safe_dump(config))
    assert main(["judge", str(grid)]) == 2
    err = capsys.readouterr().err
    assert str(wrong) in err and "train.lr 0.01" in err and "its cell has 0.1" in err


def test_a_run_copied_into_another_seeds_folder_is_refused(tmp_path: Path, capsys) -> None:
    """A copy of seed 0's rows in seed 1's folder (that folder's config kept) would be a second pair of one run:
    its rows, clock included, are seed 0's, and judge refuses both folders by name."""
    grid = write_grid(tmp_path / "toy", CLAIMS[:1])
    source, copy = folder(grid, "fast", 0), folder(grid, "fast", 1)
    (copy / "metrics.jsonl").write_text((source / "metrics.jsonl").read_text())
    assert main(["judge", str(grid)]) == 2
    err = capsys.readouterr().err
    assert str(source) in err and str(copy) in err and "same rows" in err
    assert main(["compare", str(grid)]) == 2


ROWS = st.lists(st.fixed_dictionaries({"round": st.integers(0, 2), "test_acc": st.sampled_from([0.5, 0.75]),
                                        "wall_s": st.sampled_from([0.0, 1.0, 1.5, 2])}), max_size=3)


A_ROWS, B_ROWS = [{"round": 1, "test_acc": 0.5, "wall_s": 1.0}], [{"round": 1, "test_acc": 0.5, "wall_s": 2}]


@settings(max_examples=200, deadline=None)
@given(metrics=st.lists(ROWS, max_size=6))
@example(metrics=[A_ROWS, B_ROWS, A_ROWS, B_ROWS])  # two clocks, each copied: the first copy found is run2's
def test_copies_are_found_as_a_comparison_of_every_pair_would_find_them(metrics: list[list[dict]]) -> None:
    """Runs drawn from few values (clocks that coincide, rows that differ only past the clock, clocks that never
    ran): check_distinct, which compares whole rows only among runs sharing a clock, refuses exactly when two runs
    with a running clock hold the same rows, naming the same first pair as comparing every run with every other."""
    from fedaccel.report.identity import check_distinct
    from fedaccel.report.reading import Run

    runs = [Run(Path(f"run{k}"), {}, rows) for k, rows in enumerate(metrics)]
    ran = [k for k, rows in enumerate(metrics) if any(row["wall_s"] > 0 for row in rows)]
    canonical = {k: json.dumps(metrics[k], sort_keys=True) for k in ran}
    pairs = [(j, k) for k in ran for j in ran if j < k and canonical[j] == canonical[k]]
    want = min(pairs, key=lambda pair: (pair[1], pair[0])) if pairs else None
    try:
        check_distinct(runs)
        got = None
    except UserError as exc:
        got = tuple(int(word.removeprefix("run")) for word in str(exc).split()[:3:2])
    assert got == want


@settings(max_examples=150, deadline=None)
@given(runs=st.lists(st.tuples(ROWS, st.sampled_from([None, b"w0", b"w1", b"w2"])), max_size=5))
@example(runs=[(A_ROWS, b"w0"), (A_ROWS, b"w1")])  # a plugin equal to a built-in method, over one round
@example(runs=[(A_ROWS, b"w0"), (A_ROWS, None)])  # a copy without its weights file
def test_equal_rows_are_no_copy_where_each_run_saved_weights_of_its_own(
        runs: list[tuple[list[dict], bytes | None]]) -> None:
    """Two genuine runs may agree in every row, clock included (a plugin that equals a built-in method, over a
    few rounds): where both have a final weights file and the files differ, they are not refused; any other pair
    of equal rows with a running clock, or of equal weights files, is, naming the first such pair."""
    import tempfile

    from fedaccel.report.identity import MODEL_FILE, check_distinct
    from fedaccel.report.reading import Run

    with tempfile.TemporaryDirectory() as tmp:
        made = []
        for k, (rows, weights) in enumerate(runs):
            (path := Path(tmp) / f"run{k}").mkdir()
            if weights is not None:
                (path / MODEL_FILE).write_bytes(weights)
            made.append(Run(path, {}, rows))
        ran = [any(row["wall_s"] > 0 for row in rows) for rows, _ in runs]
        text = [json.dumps(rows, sort_keys=True) for rows, _ in runs]
        weights = [w for _, w in runs]
        own = [(j, k) for k in range(len(runs)) for j in range(k)  # told apart by weights files of their own
               if weights[j] is not None and weights[k] is not None and weights[j] != weights[k]]
        same_rows = [(j, k) for k in range(len(runs)) for j in range(k)
                     if ran[j] and ran[k] and text[j] == text[k] and (j, k) not in own]
        same_weights = [(j, k) for k in range(len(runs)) for j in range(k)
                        if runs[j][1] is not None and runs[j][1] == runs[k][1]]
        want = min(same_rows, key=lambda p: (p[1], p[0])) if same_rows else (
            min(same_weights, key=lambda p: (p[1], p[0])) if same_weights else None)
        try:
            check_distinct(made)
            got = None
        except UserError as exc:
            got = tuple(int(Path(word).name.removeprefix("run")) for word in str(exc).split()[:3:2])
    assert got == want


def test_a_run_copied_with_its_rows_touched_up_is_refused_by_its_final_weights(tmp_path: Path, capsys) -> None:
    """Seed 0's run copied into seed 1's folder, its rows changed in the last digit of one clock reading (no longer
    the same rows) but its model.pt kept: the same final weights, byte for byte, so judge and compare still
    refuse it, naming both folders; the file is hashed, never loaded."""
    from fedaccel.report.identity import MODEL_FILE

    grid = write_grid(tmp_path / "toy", CLAIMS[:1])
    source, copy = folder(grid, "fast", 0), folder(grid, "fast", 1)
    for run in grid.iterdir():  # bytes no unpickler would accept: loading any of them would fail the test
        if run.is_dir():
            (run / MODEL_FILE).write_bytes(b"\x80\x05 not a pickle, weights of " + run.name.encode())
    assert main(["judge", str(grid)]) == 0  # distinct weights: judged
    capsys.readouterr()
    rows = [json.loads(line) for line in (source / "metrics.jsonl").read_text().splitlines()]
    rows[-1]["wall_s"] += 1e-3
    (copy / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (copy / MODEL_FILE).write_bytes((source / MODEL_FILE).read_bytes())
    for command in (["judge", str(grid)], ["compare", str(grid)]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert str(source) in err and str(copy) in err and "same final weights" in err and len(err.splitlines()) == 1


def test_a_claim_side_matching_two_runs_a_seed_is_refused_at_load(tmp_path: Path) -> None:
    """A side that leaves out the varied train.lr selects four runs of every seed: refused when the experiment
    is loaded, naming the cells and the key that tells them apart (before: one kept by dictionary order)."""
    loose = {**CLAIMS[0], "a": {"algorithm": "fedavg"}}
    with pytest.raises(ConfigError, match=r"claims\[0\]\.a selects two cells of seed 0, .* add train\.lr"):
        load_experiment(write_grid(tmp_path / "toy", [loose]) / "experiment.yaml")


def test_judge_refuses_a_side_with_two_runs_of_one_seed() -> None:
    """The same rule in judge itself (the reproductions' claims are code, not an experiment file)."""
    from fedaccel.report.claims import judge, rounds_to, Claim
    from fedaccel.report.reading import Run

    runs = [Run(Path(f"lr{lr}-s0"), {"train": {"lr": lr}, "run": {"seed": 0}}, [{"round": 1, "test_acc": 0.9}])
            for lr in (0.1, 0.2)]
    claim = Claim("any", "toy", {}, None, rounds_to(0.8), "less", value=1.0)
    with pytest.raises(ConfigError, match="side a selects two runs of seed 0, lr0.1-s0 and lr0.2-s0"):
        judge(claim, runs)


def test_seeds_without_a_partner_are_named_in_the_row_and_claims_json(tmp_path: Path, capsys) -> None:
    """fast's seed 5 missing, judged with --partial: slow's seed 5 has no partner, said in the row and stored."""
    import shutil

    grid = write_grid(tmp_path / "toy", CLAIMS[:1])
    shutil.rmtree(folder(grid, "fast", 5))
    assert main(["judge", str(grid), "--partial"]) == 0
    judged = json.loads((grid / "claims.json").read_text())[0]
    assert judged["seeds"] == 5 and judged["unpaired"] == {"b": [5]}
    assert "seed(s) 5 of b left out: no partner in a" in judged["note"]
    assert "seed(s) 5 of b left out: no partner in a" in capsys.readouterr().out


def test_plan_does_not_plan_seeds_for_an_effect_against_the_claim(tmp_path: Path, capsys) -> None:
    """"slow reaches 0.8 sooner than fast": the pilot's rounds differ by about +2.8 the other way; --plan says the
    pilot seeds leaning the other way instead of a seed count to 'detect' it."""
    grid = write_grid(tmp_path / "toy", CLAIMS[:2])
    assert main(["judge", str(grid), "--plan"]) == 0
    lines = {line.split(" |")[0]: line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")}
    assert lines["| fast reaches 0.8 sooner than slow"].rstrip(" |").endswith("| 6")
    assert "the pilot seeds lean the other way" in lines["| slow reaches 0.8 sooner than fast"]


def test_a_claim_added_after_the_runs_forms_its_own_family_and_says_so(tmp_path: Path, capsys) -> None:
    """One family, claim 0 (p = 2/64) beside an added claim with p = 0.72 would get q = 0.0625 and stay
    inconclusive; the added claim forms its own family, so claim 0 agrees at q = p, and the added row says how it
    came to be (in the table and in claims.json)."""
    from fedaccel.report.claims import POST_HOC

    added = {**CLAIMS[3], "added": "after the first verdicts"}
    grid = write_grid(tmp_path / "toy", [CLAIMS[0], added])
    assert main(["judge", str(grid)]) == 0
    first, later = json.loads((grid / "claims.json").read_text())
    assert first["q"] == first["p"] == pytest.approx(2 / 64) and first["verdict"] == "agrees"
    assert later["q"] == later["p"] and later["post_hoc"] == "after the first verdicts" and "post_hoc" not in first
    table = capsys.readouterr().out.splitlines()
    assert POST_HOC in next(line for line in table if line.startswith("| noisy")) and POST_HOC not in table[2]


def test_looks_in_the_experiment_file_judge_its_rows_by_the_stages_combination(tmp_path: Path, capsys) -> None:
    """A user who raised seeds after a look says so in the file (`looks:`): every row is then judged by the
    inverse-normal combination of its stages' own tests (the p of `claims.Raised`), never the pooled seeds'
    (6 pairs all one way: pooled p = 2/64); a malformed `looks:` is one line."""
    import yaml

    from fedaccel.report.claims import Raised, judge
    from fedaccel.report.judge import claims_from_file
    from fedaccel.report.reading import load_runs

    grid = write_grid(tmp_path / "toy", CLAIMS[:1])
    raw = yaml.safe_load((grid / "experiment.yaml").read_text())
    raw["looks"] = [list(SEEDS[:3])]  # 3 seeds, a look at their verdicts, then the other 3
    (grid / "experiment.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    assert main(["judge", str(grid)]) == 0
    row = json.loads((grid / "claims.json").read_text())[0]
    claims, _, _ = claims_from_file(grid / "experiment.yaml")
    runs = load_runs([p for p in grid.iterdir() if p.is_dir()])
    expected = judge(claims[0], runs, (), Raised("looks at 3 seeds", (tuple(SEEDS[:3]),)))
    assert row["p"] == pytest.approx(expected.p) and row["p"] > 2 / 64  # the combination, not the pooled seeds
    assert row["seeds_raised"] == "looks at 3 seeds" and row["stages"] == [list(SEEDS[:3]), list(SEEDS[3:])]
    assert "p combines its stages' own tests" in capsys.readouterr().out
    assert main(["judge", str(grid), "--plan"]) == 0  # a plan of the pooled test, for a grid raised after a look
    assert "This grid's seeds were raised after a look (`looks:`)" in capsys.readouterr().out
    for bad in ([[0, 1], [1, 2]], [0, 1], {"seeds": [[0, 1]], "cap": 2}, [[]], [[*SEEDS[:2], 17]]):
        raw["looks"] = bad  # the last: a seed no cell runs (a typo that moved every row's stage weights and p)
        (grid / "experiment.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
        assert main(["judge", str(grid)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "looks" in err[0], err


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(looks=st.recursive(st.none() | st.booleans() | st.integers(-3, 30) | st.text(max_size=3) | st.floats(),
                          lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(["seeds", "cap", "x"]),
                                                                                       inner, max_size=3),
                          max_leaves=12))
def test_any_hand_written_looks_is_taken_or_one_config_error_line(looks: object, tmp_path: Path) -> None:
    """Whatever a file's `looks:` holds, reading it gives the stages or one ConfigError line, never a traceback."""
    import yaml

    from fedaccel.errors import ConfigError
    from fedaccel.report.claims import Raised
    from fedaccel.report.judge import looks_from_file

    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump({"name": "toy", "looks": looks}))
    try:
        raised = looks_from_file(path)
    except ConfigError as exc:
        assert "looks" in str(exc) and "\n" not in str(exc)
    else:
        assert raised is None or (isinstance(raised, Raised) and raised.looks and raised.cap > sum(map(len, raised.looks)))


@pytest.mark.parametrize("edit, says", [
    (lambda e: e["grid"].update({"run.sed": e["grid"].pop("run.seed")}),
     "grid: unknown config key 'run.sed'; known under run: seed"),
    (lambda e: e.update({"target": [0.8]}), "unknown experiment key 'target'; known: targets"),
])
def test_an_edited_experiment_copy_with_a_typo_is_one_line_for_judge_and_compare(
        tmp_path: Path, capsys, edit: Any, says: str) -> None:
    """The experiment.yaml beside a grid's runs, edited by hand: a grid key misspelt was a YAML RepresenterError
    traceback in judge, and a top-level key misspelt was taken silently (the experiment command refuses both)."""
    grid = write_grid(tmp_path / "toy", CLAIMS[:1])
    experiment = yaml.safe_load((grid / "experiment.yaml").read_text())
    edit(experiment)
    (grid / "experiment.yaml").write_text(yaml.safe_dump(experiment, sort_keys=False))
    for command in ("judge", "compare"):
        assert main([command, str(grid)]) == 2
        err = capsys.readouterr().err
        assert says in err and len(err.strip().splitlines()) == 1, err


@settings(max_examples=200, deadline=None)
@given(parts=st.lists(st.sampled_from(["run", "seed", "train", "lr", "algorithm", "alpha", "data", "split", "x", "",
                                       "name", "sed", "model"]), min_size=1, max_size=4))
def test_any_dotted_key_is_a_config_key_or_one_line(parts: list[str]) -> None:
    from fedaccel.runs.config import config_key_fault, load_config

    dotted = ".".join(parts)
    fault = config_key_fault(dotted)
    assert fault is None or ("\n" not in fault and fault.startswith(f"unknown config key {dotted!r}"))
    if dotted in ("run.seed", "train.lr", "algorithm.alpha", "data.split.alpha"):
        assert fault is None
    if parts[0] not in ("run", "train", "algorithm", "data", "model", "name"):
        assert fault is not None


def test_an_experiment_whose_looks_name_a_seed_it_does_not_run_is_refused_when_loaded(tmp_path: Path) -> None:
    import yaml

    from fedaccel.errors import ConfigError
    from fedaccel.grids.experiment import load_experiment

    path = tmp_path / "raised.yaml"
    base = Path(__file__).resolve().parents[1] / "configs" / "demo.yaml"
    spec = {"name": "raised", "base": str(base), "grid": {"run.seed": [0, 1, 2, 3]}, "looks": [[0, 1]]}
    path.write_text(yaml.safe_dump(spec))
    assert load_experiment(path).cells
    path.write_text(yaml.safe_dump({**spec, "looks": [[0, 1, 7]]}))
    with pytest.raises(ConfigError, match=r"looks names seed 7, which no cell of the grid runs \(its seeds: 0, 1, 2, 3\)"):
        load_experiment(path)


def test_a_grid_whose_base_does_not_resolve_beside_its_runs_is_compared_plotted_and_judged(
        tmp_path: Path, capsys) -> None:
    """experiments.md's own example (a relative base: and a variant {}) ran, then compare, plot and judge refused it:
    the copy beside the runs did not find its base, so the {} cell took the default train.lr, "not its cell's run".
    A run in the wrong folder is still refused by a key its cell spells."""
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "base.yaml").write_text(yaml.safe_dump({
        "data": {"dataset": "digits", "clients": 3, "split": "iid"}, "model": "softmax",
        "train": {"rounds": 2, "lr": 0.05, "batch_size": 20}, "run": {"progress": False}}))
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "var.yaml").write_text(yaml.safe_dump({
        "name": "var", "base": "../configs/base.yaml",
        "grid": {"run.seed": [0, 1], "variant": [{}, {"train.batch_size": 10, "train.lr": 0.1}]},
        "claims": [{"text": "the variant trains", "a": {"train.batch_size": 10}, "b": {"train.batch_size": 20},
                    "measure": {"final": "test_acc"}, "expect": "greater"}]}, sort_keys=False))
    out = tmp_path / "runs" / "var"
    assert main(["experiment", str(tmp_path / "experiments" / "var.yaml"), "--out", str(out), "--no-progress"]) == 0
    for command in (["compare", str(out)], ["plot", str(out), "-o", str(tmp_path / "c.png")], ["judge", str(out)]):
        assert main(command) == 0, capsys.readouterr().err
    capsys.readouterr()
    base_cell, variant_cell = sorted(p for p in out.iterdir() if (p / "config.yaml").is_file())[:2]
    config = yaml.safe_load((variant_cell / "config.yaml").read_text())
    config["train"]["batch_size"] = 20  # the base's run in the variant's folder
    (variant_cell / "config.yaml").write_text(yaml.safe_dump(config))
    assert main(["compare", str(out)]) == 2
    assert "train.batch_size 20" in capsys.readouterr().err
