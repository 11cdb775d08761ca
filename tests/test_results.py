"""Tests for fedaccel.report (reading, tables, figures): loading run folders, grouping, curves, tables, plots."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from fedaccel.errors import UserError
from fedaccel.report import figures as results
from fedaccel.report.figures import _make_figure, plot_curves
from fedaccel.report.reading import group_runs, load_run, load_runs, series
from fedaccel.report.tables import compare_table, rounds_to_target


def make_config(algorithm="fedavg", seed=0, split="case1", name="", **algo_params):
    return {
        "name": name,
        "algorithm": {"name": algorithm, **algo_params},
        "data": {"dataset": "mnist", "split": split, "clients": 10},
        "model": {"name": "cnn"},
        "train": {"lr": 0.05},  # rounds: write_run's, the rows written
        "run": {"seed": seed, "device": "cpu"},
    }


def write_run(folder: Path, config: dict, accs, losses=None, start_round=1, finished=True) -> Path:
    folder.mkdir(parents=True)
    train = config.get("train", {})  # readers refuse rows beyond train.rounds; unset: a finished run ran them all,
    last = start_round + len(accs) - 1  # an unfinished one was cut 3 rounds short
    rounds = max(train["rounds"], last) if "rounds" in train else last if finished else last + 3
    config = {**config, "train": {**train, "rounds": rounds}}
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    lines = []
    for i, acc in enumerate(accs):
        rnd = start_round + i
        loss = losses[i] if losses is not None else 1.0 - acc
        row = {
            "round": rnd,
            "test_acc": acc,
            "test_loss": loss,
            "train_loss": loss * 0.9,
            "wall_s": 1.5 * (rnd + 1),
            "bytes_up": 1000 * rnd,
            "bytes_down": 1000 * rnd,
            "local_steps": 10 * rnd,
            "diag": {"gsnr": 0.1 * rnd},
        }
        lines.append(json.dumps(row))
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    if finished:
        last = start_round + len(accs) - 1
        summary = {"finished": True, "rounds": last, "final": json.loads(lines[-1])}
        (folder / "summary.json").write_text(json.dumps(summary))
    return folder


# Rounds 1..5. FedAvg reaches 0.5 at round 3 (mean), 0.7 at round 5; "fast" at rounds 1 and 2.
FEDAVG = {0: [0.1, 0.3, 0.5, 0.6, 0.7], 1: [0.3, 0.3, 0.5, 0.6, 0.9]}  # mean .2 .3 .5 .6 .8
FAST = {0: [0.5, 0.7, 0.8, 0.85, 0.9], 1: [0.5, 0.7, 0.8, 0.85, 0.92]}  # mean .5 .7 .8 .85 .91


@pytest.fixture
def experiment(tmp_path: Path) -> Path:
    exp = tmp_path / "exp"
    for seed, accs in FEDAVG.items():
        write_run(exp / f"fedavg-s{seed}", make_config("fedavg", seed), accs)
    for seed, accs in FAST.items():
        write_run(exp / f"fast-s{seed}", make_config("fast", seed, mu=0.1), accs)
    (exp / "notes").mkdir()  # a sub-folder without metrics.jsonl is ignored
    return exp


# ---------------------------------------------------------------------------- loading


def test_load_run_reads_config_metrics_and_summary(tmp_path):
    folder = write_run(tmp_path / "r", make_config(), [0.1, 0.2])
    run = load_run(folder)
    assert run.path == folder
    assert run.config["algorithm"]["name"] == "fedavg"
    assert [m["round"] for m in run.metrics] == [1, 2]
    assert run.metrics[1]["test_acc"] == 0.2
    assert run.finished and run.summary["rounds"] == 2
    assert run.seed == 0


def test_label_uses_name_then_algorithm(tmp_path):
    a = load_run(write_run(tmp_path / "a", make_config("fedprox"), [0.1]))
    b = load_run(write_run(tmp_path / "b", make_config("fedprox", name="my run"), [0.1]))
    assert a.label == "fedprox"
    assert b.label == "my run"


def test_group_key_ignores_seed_and_name_only(tmp_path):
    a = load_run(write_run(tmp_path / "a", make_config(seed=1), [0.1]))
    b = load_run(write_run(tmp_path / "b", make_config(seed=2, name="x"), [0.1]))
    c = load_run(write_run(tmp_path / "c", make_config(seed=1, split="case2"), [0.1]))
    assert a.group_key == b.group_key
    assert a.group_key != c.group_key
    assert json.loads(a.group_key)["run"] == {"device": "cpu"}


def test_truncated_last_line_is_skipped(tmp_path):
    folder = write_run(tmp_path / "r", make_config(), [0.1, 0.2], finished=False)
    with open(folder / "metrics.jsonl", "a") as f:
        f.write('{"round": 3, "test_acc": 0.')  # killed mid-write
    run = load_run(folder)
    assert [m["round"] for m in run.metrics] == [1, 2]
    assert not run.finished


def test_invalid_line_in_the_middle_is_an_error(tmp_path):
    folder = write_run(tmp_path / "r", make_config(), [0.1, 0.2], finished=False)
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    (folder / "metrics.jsonl").write_text("\n".join([lines[0], "{oops", lines[1]]) + "\n")
    with pytest.raises(UserError, match=r"metrics.jsonl:2"):
        load_run(folder)


def test_rounds_that_do_not_increase_are_refused_by_every_reader(tmp_path):
    """Two writers of one folder interleave their rows (26, 26, 27, 28, 27, ...): no table from that."""
    folder = write_run(tmp_path / "exp" / "r", make_config(), [0.1, 0.2, 0.3, 0.4])
    lines = (folder / "metrics.jsonl").read_text().splitlines()  # rounds 1, 2, 3, 4
    (folder / "metrics.jsonl").write_text("\n".join([lines[0], lines[1], lines[2], lines[1], lines[3]]) + "\n")
    message = r"metrics.jsonl:4: round 2 after round 3; .*delete the run folder"
    for read in (load_run, lambda f: compare_table([f.parent], [0.5]),
                 lambda f: plot_curves([f], tmp_path / "c.png")):
        with pytest.raises(UserError, match=message) as info:
            read(folder)
        assert "\n" not in str(info.value)
    (folder / "metrics.jsonl").write_text("\n".join([lines[0], lines[0]]) + "\n")  # a repeated round too
    with pytest.raises(UserError, match=r"metrics.jsonl:2: round 1 after round 1"):
        load_run(folder)


def test_a_gap_in_the_evaluated_rounds_is_refused_by_every_reader(tmp_path, capsys):
    """Rows lost from the middle of metrics.jsonl (a rewrite cut short by a full disk): no table from that."""
    from fedaccel.cli import main

    config = {**make_config(), "train": {"rounds": 7, "lr": 0.05}, "eval": {"every": 2}}
    folder = write_run(tmp_path / "exp" / "r", config, [0.1, 0.2, 0.3, 0.4, 0.5], start_round=0)
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    for row, rnd in zip(rows, [0, 2, 4, 6, 7]):
        row["round"] = rnd
    write = lambda kept: (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))  # noqa: E731
    write(rows)
    assert [r["round"] for r in load_run(folder).metrics] == [0, 2, 4, 6, 7]  # the rhythm of eval.every and the end
    write(rows[:3])  # a run still going (or killed) at round 4: no gap
    assert len(load_run(folder).metrics) == 3
    write([rows[0], rows[1], rows[3], rows[4]])  # round 4 lost
    for read in (load_run, lambda f: compare_table([f.parent], [0.5])):
        with pytest.raises(UserError, match=r"metrics.jsonl: round 4 is missing \(eval.every = 2\)") as info:
            read(folder)
        assert "\n" not in str(info.value)
    capsys.readouterr()
    assert main(["compare", str(folder.parent), "--targets", "0.5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "round 4 is missing" in err[0] and str(folder / "metrics.jsonl") in err[0]
    write([rows[0], rows[1], rows[2], rows[3]])  # the final round lost is no gap (the run may still go on)
    assert len(load_run(folder).metrics) == 4
    write([rows[1], rows[2], rows[4]])  # round 6 lost before the final row
    with pytest.raises(UserError, match="round 6 is missing"):
        load_run(folder)


def test_missing_folder_and_missing_files_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="not found"):
        load_run(tmp_path / "nope")
    with pytest.raises(UserError, match="not found"):
        load_runs([tmp_path / "nope"])
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "metrics.jsonl").write_text("")
    with pytest.raises(UserError, match="config.yaml"):
        load_run(tmp_path / "half")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="metrics.jsonl"):
        load_runs([tmp_path / "empty"])


def test_error_messages_are_one_line(tmp_path):
    folder = write_run(tmp_path / "r", make_config(), [0.1], finished=False)
    (folder / "config.yaml").write_text("a: [1, 2\nb: 3\n")
    with pytest.raises(UserError) as info:
        load_run(folder)
    assert "\n" not in str(info.value)


def test_a_folder_named_twice_is_read_once_not_called_a_copy_of_itself(experiment):
    """`compare runs/demo runs/demo/algorithm=fedavg` said the run was a copy of itself and to delete the copy."""
    once = [r.path for r in load_runs([experiment])]
    assert [r.path for r in load_runs([experiment, experiment / "fedavg-s0", f"{experiment}/"])] == once


def test_load_runs_expands_experiment_folder(experiment):
    runs = load_runs([experiment])
    assert sorted(r.path.name for r in runs) == ["fast-s0", "fast-s1", "fedavg-s0", "fedavg-s1"]
    # a single path, a run folder and Run objects are accepted too
    assert len(load_runs(experiment / "fedavg-s0")) == 1
    assert load_runs(runs) == runs


# ---------------------------------------------------------------------------- grouping


def test_group_runs_by_seed_in_order_of_appearance(experiment):
    names = ["fedavg-s0", "fast-s0", "fedavg-s1", "fast-s1"]
    runs = load_runs([experiment / n for n in names])
    groups = group_runs(runs)
    assert [label for label, _ in groups] == ["fedavg", "fast mu=0.1"]
    assert [[r.path.name for r in g] for _, g in groups] == [
        ["fedavg-s0", "fedavg-s1"],
        ["fast-s0", "fast-s1"],
    ]


def test_shared_labels_are_disambiguated_by_differing_values(tmp_path):
    write_run(tmp_path / "e" / "a0", make_config("fedavg", 0, split="case1"), [0.1])
    write_run(tmp_path / "e" / "a1", make_config("fedavg", 1, split="case1"), [0.1])
    write_run(tmp_path / "e" / "b0", make_config("fedavg", 0, split="case2"), [0.1])
    write_run(tmp_path / "e" / "c0", make_config("fedprox", 0, split="case2", mu=0.01), [0.1])
    write_run(tmp_path / "e" / "d0", make_config("fedprox", 0, split="case2", mu=0.1), [0.1])
    write_run(tmp_path / "e" / "e0", make_config("fedprox", 0, split="case2"), [0.1])
    labels = [label for label, _ in group_runs(load_runs(tmp_path / "e"))]
    assert labels == [
        "fedavg (data.split=case1)",
        "fedavg (data.split=case2)",
        "fedprox mu=0.01",  # the options the config spells are part of the method's name
        "fedprox mu=0.1",
        "fedprox",  # mu unset: the default, not named
    ]


# ---------------------------------------------------------------------------- curves


def test_series_mean_and_std(experiment):
    groups = dict(group_runs(load_runs(experiment)))
    x, mean, std = series(groups["fedavg"], "test_acc")
    np.testing.assert_array_equal(x, [1, 2, 3, 4, 5])
    np.testing.assert_allclose(mean, [0.2, 0.3, 0.5, 0.6, 0.8])
    np.testing.assert_allclose(std, [0.1, 0.0, 0.0, 0.0, 0.1])
    x, mean, std = series(groups["fedavg"][0], "diag.gsnr")  # a single run, nested metric
    np.testing.assert_allclose(mean, [0.1, 0.2, 0.3, 0.4, 0.5])
    np.testing.assert_allclose(std, 0.0)


def test_series_uses_rounds_common_to_all_runs(tmp_path):
    accs = [0.0, 0.1, 0.2, 0.3]  # rounds 0..3
    a = load_run(write_run(tmp_path / "a", make_config(seed=0), accs, start_round=0))
    b = load_run(write_run(tmp_path / "b", make_config(seed=1), [0.3, 0.4]))  # rounds 1, 2
    x, mean, _ = series([a, b], "test_acc")
    np.testing.assert_array_equal(x, [1, 2])
    np.testing.assert_allclose(mean, [0.2, 0.3])
    x, mean, std = series([a, b], "no_such_metric")
    assert x.size == mean.size == std.size == 0


def test_rounds_to_target(experiment):
    groups = group_runs(load_runs(experiment))  # folders in name order: fast-s*, fedavg-s*
    fedavg, fast = dict(groups)["fedavg"], dict(groups)["fast mu=0.1"]
    # single runs
    assert rounds_to_target(fedavg[0], 0.5) == 3.0
    assert rounds_to_target(fedavg[1], 0.3) == 1.0
    assert rounds_to_target(fedavg[0], 0.95) is None
    # groups use the mean curve: seed 1 reaches 0.9 at round 5 but the mean only 0.8
    assert rounds_to_target(fedavg, 0.8) == 5.0
    assert rounds_to_target(fedavg, 0.9) is None
    assert rounds_to_target(fast, 0.7) == 2.0
    assert rounds_to_target(groups[0], 0.7) == 2.0  # a (label, runs) tuple works too
    # loss metrics: the first round at or below the target
    assert rounds_to_target(fedavg, 0.5, metric="test_loss") == 3.0


# ---------------------------------------------------------------------------- table


def _rows(table: str) -> dict[str, list[str]]:
    lines = [line for line in table.splitlines() if line.startswith("|")]  # the note below the table is not a row
    out = {}
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        out[cells[0]] = cells
    return out


def test_compare_table_speedups(experiment):
    table = compare_table(load_runs(experiment), targets=[0.5, 0.8, 0.95])
    lines = table.splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header[:2] == ["method", "seeds"]
    assert "rounds to 0.5" in header and "speed-up @0.8" in header
    assert len(lines) == 6  # header, separator, two groups, a blank line and the note on rounds
    assert lines[-1].startswith("Rounds to a target: each seed's interpolated crossing")
    rows = _rows(table)
    fedavg, fast = rows["fedavg (baseline)"], rows["fast mu=0.1"]
    assert fedavg[1] == fast[1] == "2"
    # best (mean over seeds of each seed's best) and final (each seed's mean of its last 3 evaluations, as the
    # claims measure it): mean ± std over seeds. FedAvg (.5+.6+.7)/3 = .6 and (.5+.6+.9)/3 = .6667
    assert fedavg[2] == "0.8000"
    assert fedavg[3] == "0.6333 ± 0.0333"
    assert fast[2] == "0.9100"
    assert fast[3] == "0.8533 ± 0.0033"  # (.8+.85+.9)/3 = .85 and (.8+.85+.92)/3 = .8567
    # targets, per seed (interpolated): 0.5 -> fedavg 3 and 3, fast 1 and 1 (3.00×); 0.8 -> fedavg never (its
    # last round, 5) and 4 + 0.2/0.3 = 4.67, mean 4.83; fast 3 and 3 (1.61×); 0.95 -> never. Two seeds can never
    # tell a difference apart (the smallest two-sided p is 0.5): ≈
    # (4.83's interval, 2.7 to 7, cut at the 5-round budget); at 0.95 no seed of either gets there
    assert fedavg[4:] == ["3", "1.00×", "4.8 [2.7–5] (1 of 2 never)", "1.00×", "never (2 of 2)", "—"]
    assert fast[4:] == ["1", "3.00× ≈", "3", "≥ 1.61× ≈", "never (2 of 2)", "—"]  # ≥: FedAvg's never-seed counts as
    # its last round


def test_compare_table_baseline_choice(experiment):
    runs = load_runs(experiment)
    rows = _rows(compare_table(runs, targets=[0.5], baseline="fast mu=0.1"))
    assert rows["fast mu=0.1 (baseline)"][4:] == ["1", "1.00×"]
    assert rows["fedavg"][4:] == ["3", "0.33× ≈"]
    with pytest.raises(UserError, match=r"unknown baseline 'scaffold'.*'fast mu=0.1', 'fedavg'"):
        compare_table(runs, targets=[0.5], baseline="scaffold")


def test_compare_table_default_baseline_without_fedavg(tmp_path):
    write_run(tmp_path / "e" / "a", make_config("scaffold"), [0.2, 0.6])
    write_run(tmp_path / "e" / "b", make_config("fedprox"), [0.6, 0.7])
    rows = _rows(compare_table(load_runs(tmp_path / "e"), targets=[0.6]))
    # subfolders are taken in name order, so "scaffold" (folder a) comes first
    assert rows["scaffold (baseline)"][4:] == ["2", "1.00×"]
    assert rows["fedprox"][1] == "1"
    assert rows["fedprox"][3] == "0.6500"  # a single seed, (0.6 + 0.7) / 2: no ± part
    assert rows["fedprox"][4:] == ["1", "2.00× ≈"]


def test_each_row_is_measured_against_the_baseline_of_its_own_split(tmp_path):
    # FedAvg reaches 0.5 at round 4 on case1, round 2 on case2; BHerd at rounds 2 and 1.
    for split, fedavg, bherd in (("case1", [0.1, 0.2, 0.3, 0.5], [0.2, 0.5, 0.6, 0.7]),
                                 ("case2", [0.3, 0.5, 0.6, 0.7], [0.5, 0.6, 0.7, 0.8])):
        write_run(tmp_path / "e" / f"{split}-fedavg", make_config("fedavg", split=split), fedavg)
        write_run(tmp_path / "e" / f"{split}-bherd", make_config("bherd", split=split, alpha=0.5), bherd)
        write_run(tmp_path / "e" / f"{split}-bherd1", make_config("bherd", split=split, alpha=1.0), fedavg)
    runs = load_runs(tmp_path / "e")
    for baseline in (None, "fedavg"):
        rows = _rows(compare_table(runs, targets=[0.5], baseline=baseline))
        assert rows["fedavg (data.split=case1) (baseline)"][4:] == ["4", "1.00×"]
        assert rows["fedavg (data.split=case2) (baseline)"][4:] == ["2", "1.00×"]
        assert rows["bherd alpha=0.5 (data.split=case1)"][4:] == ["2", "2.00× ≈"]
        assert rows["bherd alpha=0.5 (data.split=case2)"][4:] == ["1", "2.00× ≈"]
    # a baseline named by some of its distinguishing values: one per split
    for named in ("bherd (algorithm.alpha=1.0)", "bherd alpha=1.0"):  # as files spelled it before, and its name
        rows = _rows(compare_table(runs, targets=[0.5], baseline=named))
        assert rows["bherd alpha=1.0 (data.split=case2) (baseline)"][4:] == ["2", "1.00×"]
    assert rows["bherd alpha=0.5 (data.split=case1)"][4:] == ["2", "2.00× ≈"]
    assert rows["fedavg (data.split=case2)"][4:] == ["2", "1.00× ≈"]
    with pytest.raises(UserError, match="unknown baseline 'bherd \\(algorithm.alpha=0.7\\)'"):
        compare_table(runs, targets=[0.5], baseline="bherd (algorithm.alpha=0.7)")


# ---------------------------------------------------------------------------- plots


def test_plot_curves_writes_png(experiment, tmp_path):
    out = plot_curves([experiment], tmp_path / "plots" / "curves.png", title="demo")
    assert out == tmp_path / "plots" / "curves.png"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_figure_has_one_panel_per_metric(experiment):
    runs = load_runs(experiment)
    fig = _make_figure(runs, ["test_acc", "test_loss"])
    assert len(fig.axes) == 2
    acc_ax = fig.axes[0]
    assert acc_ax.get_xlabel() == "round"
    assert acc_ax.get_ylabel() == "test accuracy"
    legend = [t.get_text() for t in fig.legends[0].get_texts()]  # one legend, below the panels
    assert legend[:2] == ["fast mu=0.1", "fedavg"] and legend[2].startswith("band: 95% CI")
    assert len(acc_ax.lines) == 2
    assert len(acc_ax.collections) == 2  # one std band per multi-seed group
    fig = _make_figure(runs[:1], ["test_acc", "test_loss", "train_loss"])
    assert len(fig.axes) == 3
    assert len(fig.axes[0].collections) == 0  # a single seed: no band


def test_plot_unknown_metric_is_user_error(experiment, tmp_path):
    with pytest.raises(UserError, match="test_accuracy.*available: test_acc"):
        plot_curves([experiment], tmp_path / "x.png", metrics=["test_accuracy"])


def test_compare_marks_only_the_real_baseline_among_runs_of_one_method(tmp_path):
    # three FedAvg runs that differ in their learning rate: each used to be its own "(baseline)"
    for k, (lr, curve) in enumerate(((0.1, [0.2, 0.6]), (0.2, [0.6, 0.7]), (0.4, [0.1, 0.2]))):
        config = make_config("fedavg")
        config["train"] = {"lr": lr}
        write_run(tmp_path / "e" / f"r{k}", config, curve)
    table = compare_table(load_runs(tmp_path / "e"), targets=[0.6])
    assert table.count("(baseline)") == 1
    rows = _rows(table)
    marked = [label for label in rows if label.endswith("(baseline)")]
    assert marked == ["fedavg (train.lr=0.1) (baseline)"]
    assert rows["fedavg (train.lr=0.2)"][4:] == ["1", "2.00× ≈"]


# ---------------------------------------------------------------------------- curves that show the difference


def _panel(fig, ylabel):
    """The main panel of a metric (the overview above it has no y label)."""
    (ax,) = [a for a in fig.axes if a.get_ylabel() == ylabel]
    return ax


def _curve_lines(ax):
    return [line for line in ax.lines if line.get_linestyle() != ":"]


def _close_pair(tmp_path, rounds=40):
    """The demo's shape: round 0 at 0.0, then two methods within 0.001 of each other in 0.90-0.96."""
    accs = [0.0] + [0.96 - 0.06 * 0.9 ** r for r in range(1, rounds + 1)]
    write_run(tmp_path / "e" / "a", make_config("fedavg"), accs, start_round=0)
    write_run(tmp_path / "e" / "b", make_config("bherd", alpha=0.5), [a + 0.0005 * (r > 0) for r, a in enumerate(accs)],
              start_round=0)
    return load_runs([tmp_path / "e" / "a", tmp_path / "e" / "b"])


def test_y_range_comes_from_the_rounds_after_the_first_with_all_values_above(tmp_path):
    fig = _make_figure(_close_pair(tmp_path), ["test_acc"])
    ax = _panel(fig, "test accuracy")
    # from round max(1, 5% of 40) = 2 on the curves span fedavg's round 2 to bherd's round 40 (0.9114 to
    # 0.9596); the panel shows that with a 5% margin either side, round 0's 0.0 and round 1's 0.906 left out
    low, high = 0.96 - 0.06 * 0.9**2, 0.96 - 0.06 * 0.9**40 + 0.0005
    np.testing.assert_allclose(ax.get_ylim(), [low - 0.05 * (high - low), high + 0.05 * (high - low)])
    (over,) = [a for a in fig.axes if a is not ax]  # the thin full-range panel above it
    assert over.get_ylim()[0] <= 0.0 and over.get_position().height < ax.get_position().height / 2


def test_a_diverged_group_leaves_the_others_readable_and_shows_whole_in_the_overview(tmp_path):
    """A loss reaching 1e33 set the panel's scale and range for every group: the others were a flat line at the bottom.
    The range follows the groups that did not diverge; the overview above shows the diverged one whole."""
    rounds = np.arange(1, 21)
    write_run(tmp_path / "e" / "a", make_config("fedavg"), list(0.6 + 0.01 * rounds), losses=list(0.5 - 0.02 * rounds))
    write_run(tmp_path / "e" / "b", make_config("fedavg", server_lr=10.0), [0.5] * 20, losses=list(10.0 ** rounds))
    summary = json.loads((tmp_path / "e" / "b" / "summary.json").read_text())
    (tmp_path / "e" / "b" / "summary.json").write_text(json.dumps({**summary, "diverged": True, "diverged_round": 3}))
    fig = _make_figure(load_runs(tmp_path / "e"), ["test_loss", "test_acc"])
    loss, acc = _panel(fig, "test loss"), _panel(fig, "test accuracy")
    assert loss.get_yscale() == "linear" and loss.get_ylim()[1] < 0.6  # fedavg's 0.48 -> 0.1, not 1e20
    assert acc.get_ylim()[0] > 0.55  # fedavg's 0.61 -> 0.8, not the diverged run's 0.5
    overviews = [a for a in fig.axes if a not in (loss, acc)]
    assert len(overviews) == 2 and max(a.get_ylim()[1] for a in overviews) >= 1e20
    assert any(t.get_text().endswith("(diverged)") for t in fig.legends[0].get_texts())


def test_a_run_without_a_summary_diverged_at_its_first_loss_that_is_not_finite(tmp_path):
    """Packed data keeps no summary for runs it did not see diverge (BHerd's quick fig3_alpha: FedAvg with server step
    10 reached inf at round 41, unmarked, and its 1e33 set the loss panels' scale). Such a run diverged at its first
    row with a NaN or infinite loss of the global model, as the rounds' check says; one with a summary is what its
    summary says, and one cut short before its summary (killed) is not finished for that."""
    from fedaccel.report.completeness import finished
    from fedaccel.report.reading import Run

    rows = [{"round": r, "test_acc": 0.5, "test_loss": 10.0 ** r, "train_loss": 1.0} for r in range(4)]
    rows += [{"round": 4, "test_acc": 0.5, "test_loss": 1.0, "client_mean/train_loss": float("nan")},
             {"round": 5, "test_acc": 0.5, "test_loss": float("inf"), "train_loss": float("inf")}]
    assert Run(tmp_path, {}, rows).diverged_round == 5  # round 4's NaN is an extra model's loss: not divergence
    assert Run(tmp_path, {}, rows[:4]).diverged_round is None
    assert not finished(Run(tmp_path, {"train": {"rounds": 9}}, rows))  # rows to round 5 of 9, no summary: cut short
    assert Run(tmp_path, {}, rows, summary={"finished": True}).diverged_round is None
    assert Run(tmp_path, {}, rows, summary={"diverged": True, "diverged_round": 5}).diverged_round == 5
    rounds = np.arange(1, 21)
    write_run(tmp_path / "e" / "a", make_config("fedavg"), list(0.6 + 0.01 * rounds), losses=list(0.5 - 0.02 * rounds))
    write_run(tmp_path / "e" / "b", make_config("fedavg", server_lr=10.0), [0.5] * 20,
              losses=[*(10.0 ** rounds[:10]), *[float("inf")] * 10])
    runs = load_runs(tmp_path / "e")
    for run in runs:
        run.summary = None  # as unpacked: no summary.json
    fig = _make_figure(runs, ["test_loss", "test_acc"])
    assert _panel(fig, "test loss").get_ylim()[1] < 0.6  # fedavg's 0.48 -> 0.1, not 1e10
    assert any(t.get_text().endswith("(diverged)") for t in fig.legends[0].get_texts())


def test_variants_around_one_setting_are_labelled_by_what_each_changes(tmp_path):
    """BHerd's fig3_hyper: every label "bherd alpha=0.5 clients=5 batch=100 epo…", the values that told the
    variants apart cut off. Labels too long to show whole name what each group changes from the common setting;
    the shared name heads the legend; the common setting's group shows all its values."""
    from fedaccel.report.figures import legend_heading_and_labels, legend_labels
    from fedaccel.report.reading import Run
    from fedaccel.runs.config import load_config

    base = ["model=svm", "algorithm=bherd", "algorithm.alpha=0.5", "data.clients=5", "train.batch_size=100"]
    variants = [[], ["train.local_epochs=0.5"], ["train.batch_size=10"], ["data.clients=20"]]
    groups = [(str(k), [Run(tmp_path / str(k), load_config(None, [*base, *v]).to_dict(), [])])
              for k, v in enumerate(variants)]
    heading, labels = legend_heading_and_labels(groups)
    assert heading == "bherd alpha=0.5"
    assert labels == ["clients=5 batch=100 epochs=1", "epochs=0.5", "batch=10", "clients=20"]
    assert legend_labels(groups)[1] == "bherd alpha=0.5 epochs=0.5"
    assert legend_heading_and_labels(groups[:2]) == (None, ["bherd alpha=0.5 epochs=1", "bherd alpha=0.5 epochs=0.5"])


def test_loss_spanning_decades_is_drawn_on_a_log_scale(tmp_path):
    rounds = np.arange(1, 21)
    write_run(tmp_path / "e" / "a", make_config("fedavg"), [0.5] * 20, losses=list(2.0 * 0.7 ** rounds))  # 3 decades
    write_run(tmp_path / "f" / "a", make_config("fedavg"), [0.5] * 20, losses=list(0.5 - 0.02 * rounds))  # 0.5 -> 0.1
    fig = _make_figure(load_runs(tmp_path / "e"), ["test_loss", "test_acc"])
    assert _panel(fig, "test loss").get_yscale() == "log"
    assert _panel(fig, "test accuracy").get_yscale() == "linear"
    fig = _make_figure(load_runs(tmp_path / "f"), ["test_loss"])
    assert _panel(fig, "test loss").get_yscale() == "linear"


def test_targets_are_dotted_labelled_lines_on_the_accuracy_panel(tmp_path):
    fig = _make_figure(_close_pair(tmp_path), ["test_acc", "test_loss"], targets=[0.93, 0.95, 0.99],
                       targets_from="grid's targets")
    ax = _panel(fig, "test accuracy")
    dotted = [line for line in ax.lines if line.get_linestyle() == ":"]
    assert sorted(line.get_ydata()[0] for line in dotted) == [0.93, 0.95]  # 0.99: no curve gets there
    assert {t.get_text() for a in ax.artists for t in a.get_children()} == {"0.93", "0.95"}  # TargetLabels
    lo, hi = ax.get_ylim()
    assert lo < 0.93 and 0.95 < hi
    assert not [line for line in _panel(fig, "test loss").lines if line.get_linestyle() == ":"]
    assert "target (grid's targets)" in [t.get_text() for t in fig.legends[0].get_texts()]


def test_experiment_draws_its_grid_targets(tmp_path, monkeypatch):
    """run_experiment hands the grid's ``targets`` to the curves (cells finished earlier are not rerun)."""
    from fedaccel.grids.experiment import load_experiment, run_experiment
    from fedaccel.runs.config import dump_config

    (tmp_path / "grid.yaml").write_text(yaml.safe_dump({
        "name": "g", "out_dir": str(tmp_path / "out"), "base": {"train": {"rounds": 2}},
        "grid": {"algorithm": ["fedavg", "fedprox"]}, "targets": [0.6, 0.8],
    }))
    experiment = load_experiment(tmp_path / "grid.yaml")
    for k, (name, config) in enumerate(experiment.cells):  # rows of their own: the same rows would be a copy
        folder = write_run(experiment.out_dir / name, {}, [0.5, 0.7 + 0.01 * k])
        dump_config(config, folder / "config.yaml")
    seen = {}
    monkeypatch.setattr(results, "plot_curves", lambda *a, **kw: seen.update(kw) or tmp_path / "c.png")
    run_experiment(experiment, progress=False)
    assert list(seen["targets"]) == [0.6, 0.8]


def test_overlapping_curves_stay_visible_in_a_documented_order(tmp_path):
    """Groups are drawn in legend order, each later one on top and thinner, with its own dashes and
    markers at staggered rounds: FedAvg under an equal BHerd line shows as a halo around it."""
    runs = _close_pair(tmp_path)
    write_run(tmp_path / "e" / "c", make_config("scaffold"), [0.0] + [0.95] * 40, start_round=0)
    runs = runs + load_runs(tmp_path / "e" / "c")
    fig = _make_figure(runs, ["test_acc"])
    lines = _curve_lines(_panel(fig, "test accuracy"))
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["fedavg", "bherd alpha=0.5", "scaffold"]
    widths = [line.get_linewidth() for line in lines]
    orders = [line.get_zorder() for line in lines]
    assert widths == sorted(widths, reverse=True) and len(set(widths)) == 3
    assert orders == sorted(orders) and len(set(orders)) == 3
    dashes = [line._unscaled_dash_pattern for line in lines]  # (offset, on-off sequence or None)
    assert len({str(d) for d in dashes}) == 3
    assert len({line.get_marker() for line in lines}) == 3
    starts = [line.get_markevery()[0] for line in lines]
    assert len(set(starts)) == 3  # markers of equal curves do not sit on each other


def test_band_is_the_95_percent_t_interval_of_the_mean(tmp_path):
    from scipy.stats import t as student_t

    from fedaccel.report.reading import mean_ci

    seeds = {0: [0.50, 0.60, 0.70], 1: [0.52, 0.66, 0.71], 2: [0.57, 0.63, 0.75]}
    for seed, accs in seeds.items():
        write_run(tmp_path / "e" / f"s{seed}", make_config("fedavg", seed), accs)
    runs = load_runs(tmp_path / "e")
    values = np.array(list(seeds.values()))
    half = student_t.ppf(0.975, 2) * values.std(axis=0, ddof=1) / np.sqrt(3)  # 4.30 * s / sqrt(3)
    x, mean, h = mean_ci(runs, "test_acc")
    np.testing.assert_allclose(mean, values.mean(axis=0))
    np.testing.assert_allclose(h, half)
    ax = _panel(_make_figure(runs, ["test_acc"]), "test accuracy")
    (band,) = ax.collections
    vertices = band.get_paths()[0].vertices
    for rnd, m, w in zip(x, mean, half):
        ys = vertices[np.isclose(vertices[:, 0], rnd), 1]
        np.testing.assert_allclose([ys.min(), ys.max()], [m - w, m + w])
    assert mean_ci(runs[:1], "test_acc")[2].tolist() == [0.0, 0.0, 0.0]


def _attack_grid(tmp_path):
    """fig6_attacks' grid: splits (IID with a timeout, Dirichlet with its alpha) x attacks x algorithms."""
    attacks = [[], [{"kind": "label-flip", "clients": [0], "from_round": 5, "shift": 3}],
               [{"kind": "noise", "clients": [0], "from_round": 5}]]
    splits = [{"name": "iid"}, {"name": "dirichlet", "alpha": 0.5}, {"name": "nonbalance"}]
    k = 0
    for split in splits:
        for attack in attacks:
            for algorithm in ("fedavg", "fedgsnr"):
                config = make_config(algorithm, split=split)
                config["attacks"] = attack
                config["train"]["client_fraction"] = 0.5
                if split["name"] == "iid":
                    config["run"]["timeout"] = 300.0
                write_run(tmp_path / "e" / f"{k:02d}", config, [0.1 + 0.01 * k, 0.5 + 0.01 * k])
                k += 1
    return load_runs(tmp_path / "e")


def test_legend_labels_name_only_what_differs_and_stay_short(tmp_path):
    from fedaccel.report.figures import legend_labels

    runs = _attack_grid(tmp_path)
    groups = group_runs(runs)
    labels = legend_labels(groups)
    assert labels[:6] == [
        "fedavg iid attacks=none", "fedgsnr iid attacks=none",
        "fedavg iid attacks=label-flip", "fedgsnr iid attacks=label-flip",
        "fedavg iid attacks=noise", "fedgsnr iid attacks=noise",
    ]  # no timeout (it follows from the split), no alpha, no client_fraction (the same everywhere)
    assert labels[6] == "fedavg dirichlet attacks=none"
    assert len(set(labels)) == len(labels) and max(map(len, labels)) <= 40
    assert max(len(label) for label, _ in groups) > 100  # compare's table keeps the full keys
    fig = _make_figure(runs, ["test_acc"])
    assert [t.get_text() for t in fig.legends[0].get_texts()] == labels
    # a long value is cut before the label is, and labels that would be equal stay apart
    short = legend_labels(groups, limit=24)
    assert len(set(short)) == len(short) and max(map(len, short)) <= 24
    assert legend_labels(group_runs(runs[:1])) == ["fedavg"]


def test_many_long_labels_keep_the_panels_and_warn_of_nothing(tmp_path, recwarn):
    import io

    runs = _attack_grid(tmp_path)
    for metrics in (["test_acc"], ["test_acc", "test_loss", "train_loss"]):
        fig = _make_figure(runs, metrics, title="fig6_attacks")
        fig.savefig(io.BytesIO(), format="png", dpi=40)
        assert not [w for w in recwarn if "layout" in str(w.message)]  # "constrained_layout not applied"
        for metric in metrics:
            ax = _panel(fig, results.METRIC_NAMES[metric])
            position = ax.get_position()
            assert position.height * fig.get_figheight() > 2.0  # inches: no sliver axes
            assert position.width * fig.get_figwidth() > 3.0
            assert fig.legends[0].get_window_extent().y1 <= ax.get_window_extent().y0  # legend below the panels


def test_plot_command_draws_the_targets_it_is_given(experiment, tmp_path, monkeypatch):
    from fedaccel.cli import main

    out = tmp_path / "p.png"
    assert main(["plot", str(experiment), "-o", str(out), "--targets", "0.5", "0.8"]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"
    seen = {}
    monkeypatch.setattr(results, "plot_curves", lambda *a, **kw: seen.update(kw) or out)
    main(["plot", str(experiment), "-o", str(out), "--targets", "0.5", "0.8"])
    assert seen["targets"] == [0.5, 0.8]


def test_labels_name_the_composed_robust_rule_and_server_optimiser() -> None:
    """The field grids' tables said "fedavg (algorithm.server_opt.name=unset, algorithm.server_opt.lr=unset, …)"
    for plain FedAvg: a composed part is named in the label, and only what still differs is appended."""
    from pathlib import Path

    from fedaccel.report.reading import Run

    def run(name: str, seed: int, **parts: object) -> Run:
        return Run(Path(f"{name}-{seed}"), {"algorithm": {"name": "fedavg", **parts}, "run": {"seed": seed}}, [])

    runs = [run("plain", 0), run("adam1", 0, server_opt={"name": "adam", "lr": 0.01}),
            run("adam3", 0, server_opt={"name": "adam", "lr": 0.03}), run("krum", 0, aggregate={"name": "krum", "f": 3}),
            run("median-avgm", 0, aggregate="median", server_opt={"name": "avgm", "lr": 1.0})]
    assert [label for label, _ in group_runs(runs)] == [
        "fedavg", "fedavg + adam lr=0.01", "fedavg + adam lr=0.03",
        "fedavg + krum f=3", "fedavg + median + avgm lr=1.0"]


def test_rounds_under_one_keep_two_decimals_so_they_match_their_speed_up() -> None:
    """make demo showed centralized SGD's 0.95 rounds as "1" beside a 2.63x speed-up over FedAvg's 2.5."""
    from fedaccel.report.tables import SeedRounds

    assert SeedRounds({0: 0.951}, 0).cell() == "0.95"
    assert SeedRounds({0: 2.54}, 0).cell() == "2.5"
    assert SeedRounds({0: 1.0}, 0).cell() == "1"


def test_a_rounds_interval_never_starts_below_zero_rounds() -> None:
    """Two seeds at 1 and 30 rounds: the t interval of their mean is 15.5 ± 184, whose low end (-169) no run can
    take; the table shows it from 0 and keeps the high end."""
    from fedaccel.report.statistics import t_interval
    from fedaccel.report.tables import SeedRounds

    low, high = t_interval([1.0, 30.0])
    assert low < 0
    assert SeedRounds({0: 1.0, 1: 30.0}, 0).cell() == f"15.5 [0–{round(high, 1):g}]"
    assert SeedRounds({0: 10.0, 1: 12.0, 2: 11.0}, 0).cell() == "11 [8.5–13.5]"  # a low end above 0 is kept


def test_a_rounds_interval_never_ends_past_the_rounds_budget(tmp_path) -> None:
    """A user saw ``18.2 [14.3–22.2]`` on a 20-round run: a seed counts at most its budget (one that never gets there
    counts as its last round), so the mean cannot pass it either; the high end is cut at the cell's runs' budget
    (train.rounds), as the low end is at 0."""
    from fedaccel.report.statistics import t_interval
    from fedaccel.report.tables import SeedRounds, seed_rounds

    by_seed = {0: 20.0, 1: 20.0, 2: 20.0, 3: 20.0, 4: 14.0, 5: 15.2}
    assert t_interval(list(by_seed.values()))[1] > 20
    never = frozenset({0, 1, 2, 3})
    assert SeedRounds(by_seed, 4, never, budget=20.0).cell() == "18.2 [15.2–20] (4 of 6 never)"
    assert SeedRounds({0: 10.0, 1: 12.0, 2: 11.0}, 0, budget=30.0).cell() == "11 [8.5–13.5]"  # a high end inside kept
    # the budget is the runs' train.rounds: 10 here, one seed at round 3.5, two never there
    for seed, accs in enumerate(([0.1] * 10, [0.1, 0.2, 0.4, 0.6] + [0.7] * 6, [0.2] * 10)):
        write_run(tmp_path / "e" / f"s{seed}", make_config("fedavg", seed), accs)
    rounds = seed_rounds(load_runs(tmp_path / "e"), 0.5)
    assert rounds.budget == 10 and t_interval(list(rounds.by_seed.values()))[1] > 10
    assert rounds.cell() == "7.8 [0–10] (2 of 3 never)"


def test_a_cell_no_seed_got_there_says_so_and_its_speed_up_is_a_bound(tmp_path) -> None:
    """A cell whose seeds all missed the target showed "—", though the legend counts a seed that never gets there as
    its last round and a cell with some such seeds says ``(4 of 6 never)``: it says ``never (n of n)``, and its
    speed-up is the bound the partial case gives (``≤``, its seeds at their budget); ``—`` only where neither the
    row nor its baseline has a seed that got there."""
    from fedaccel.report.tables import ROUNDS_NOTE

    for seed in (0, 1, 2):
        write_run(tmp_path / "e" / f"fedavg-s{seed}", make_config("fedavg", seed), [0.2, 0.4, 0.6, 0.7, 0.8])
        write_run(tmp_path / "e" / f"slow-s{seed}", make_config("slow", seed), [0.1, 0.2, 0.3, 0.3, 0.4 + 0.01 * seed])
    rows = _rows(compare_table(load_runs(tmp_path / "e"), targets=[0.6, 0.9]))
    assert rows["fedavg (baseline)"][4:] == ["3", "1.00×", "never (3 of 3)", "—"]
    # 3 rounds over its budget 5; three pairs cannot tell it apart (the smallest sign-flip p is 0.25)
    assert rows["slow"][4:] == ["never (3 of 3)", "≤ 0.60× ≈", "never (3 of 3)", "—"]
    assert "never (n of n): no seed got there" in ROUNDS_NOTE


def test_long_names_lose_the_options_every_name_shares_so_the_legend_shows_what_differs() -> None:
    """DP cells (``fedavg + dp clip=0.19 delta=1e-05 target_epsilon=8``) were cut to ``... ta… #5``: when a name
    is longer than the limit, the options one value throughout are left out of every name, and names that would
    become equal keep them."""
    from fedaccel.report.figures import without_constant_options

    names = ["fedavg", "bherd alpha=0.5", "fedavg + adam lr=0.01",
             "fedavg + dp clip=0.19 delta=1e-05 target_epsilon=8", "fedavg + dp clip=0.19 delta=1e-05 target_epsilon=4",
             "bherd alpha=0.5 + dp clip=0.19 delta=1e-05 target_epsilon=8",
             "fedavg + dp clip=0.19 delta=1e-05 target_epsilon=8 + adam lr=0.01"]
    assert without_constant_options(names) == [
        "fedavg", "bherd", "fedavg + adam", "fedavg + dp target_epsilon=8", "fedavg + dp target_epsilon=4",
        "bherd + dp target_epsilon=8", "fedavg + dp target_epsilon=8 + adam"]
    assert without_constant_options(names[:3]) == names[:3]  # all short: unchanged
    assert without_constant_options(["bherd alpha=0.5 beta=1", "bherd alpha=0.5 beta=1 + dp clip=0.2 delta=1e-05"],
                                    limit=20) == ["bherd", "bherd + dp"]
    clash = ["fedavg + dp clip=0.19 delta=1e-05", "fedavg + dp delta=1e-05"]  # both would be "fedavg + dp"
    assert without_constant_options(clash, limit=20) == clash


def test_a_drawn_band_stays_within_what_the_metric_can_be(tmp_path):
    """Three seeds' t band (mean ± 4.3 standard errors) went below 0 for accuracy and loss, and can pass 1 for
    accuracy: the drawn band is cut to [0, 1] for accuracy, to 0 and up for a loss; the panel's range follows."""
    for seed, (accs, losses) in enumerate((([0.02, 0.99, 0.5], [0.01, 2.0, 0.2]), ([0.3, 0.97, 0.9], [0.5, 0.5, 0.9]),
                                           ([0.01, 0.6, 0.98], [0.02, 3.0, 0.05]))):
        write_run(tmp_path / "e" / f"s{seed}", make_config("fedavg", seed), accs, losses=losses)
    runs = load_runs(tmp_path / "e")
    fig = _make_figure(runs, ["test_acc", "test_loss"])
    for ylabel, low, high in (("test accuracy", 0.0, 1.0), ("test loss", 0.0, np.inf)):
        ax = _panel(fig, ylabel)
        metric = "test_acc" if ylabel == "test accuracy" else "test_loss"
        _, mean, half = results.mean_ci(runs, metric)
        assert (mean - half).min() < low or (mean + half).max() > high  # the t band itself passes a bound
        (band,) = ax.collections
        y = np.concatenate([path.vertices[:, 1] for path in band.get_paths()])
        assert y.min() >= low and y.max() <= high
        assert y.min() == pytest.approx(low) or y.max() == pytest.approx(high)  # cut there, not left out
        assert ax.get_ylim()[0] >= low - 0.06 * (ax.get_ylim()[1] - low)  # the range is the cut band's, padded


def test_a_group_of_the_baseline_method_measured_against_itself_is_called_a_baseline(tmp_path):
    """Two FedAvg groups (another setting) and one method: each FedAvg group is measured against itself (1.00×), and
    one was printed without "(baseline)", reading as a method 1.00× as fast as FedAvg. A row that shares no seed
    with its baseline gets "—", and the note says why."""
    write_run(tmp_path / "b", make_config("fast", seed=1, mu=0.1), FAST[1])
    write_run(tmp_path / "f", make_config(seed=2), FEDAVG[0])
    write_run(tmp_path / "g", {**make_config(seed=0), "train": {"lr": 0.1}}, FEDAVG[1])
    table = compare_table(load_runs([tmp_path / "b", tmp_path / "f", tmp_path / "g"]), targets=[0.5])
    rows = _rows(table)
    assert sorted(rows) == ["fast mu=0.1", "fedavg (train.lr=0.05) (baseline)", "fedavg (train.lr=0.1) (baseline)"]
    assert rows["fast mu=0.1"][-1] == "—"  # seed 1 against seeds 2 and 0
    assert rows["fedavg (train.lr=0.1) (baseline)"][-1] == "1.00×"
    assert "— where no seed of either got there, or the two share no seed" in table
