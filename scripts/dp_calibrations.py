"""Write fedaccel/algorithms/dp_calibrations.json: the noise multiplier of every ``target_epsilon`` in the
repository's experiments and configs, each found by dp-accounting's search (the table is not read here).

Loading an experiment calibrates every cell that asks for a target epsilon; the table lets it check a known z
(two evaluations of the accountant) instead of searching (~14). Run it after changing such an experiment, or the
sampling, rounds or delta behind one; tests/test_dp.py says which experiment is missing.

    PYTHONPATH=. python scripts/dp_calibrations.py
"""

from __future__ import annotations

import json
from pathlib import Path

from fedaccel.algorithms import dp
from fedaccel.disk import write_atomic
from fedaccel.grids.experiment import load_experiment
from fedaccel.runs.config import load_config

ROOT = Path(__file__).resolve().parents[1]


def asking_files() -> list[Path]:
    """The experiment and config files that ask for a target epsilon."""
    files = [*ROOT.glob("experiments/**/*.yaml"), *ROOT.glob("configs/**/*.yaml")]
    return sorted(f for f in files if "target_epsilon" in f.read_text(encoding="utf-8"))


def main() -> None:
    found: dict[str, float] = {}

    def searched(settings: dp.DPSettings, target: float) -> float:
        key = dp.calibration_key(settings, target)  # the cells of a grid share a few
        if key not in found:
            found[key] = dp.search_noise_multiplier(settings, target)
        return found[key]

    dp.calibrate = searched  # every calibration by the search, recorded (dp_settings calls it by this name)
    for file in asking_files():
        before = len(found)
        if file.is_relative_to(ROOT / "experiments"):
            load_experiment(file)
        else:
            load_config(file, [])
        print(f"{file.relative_to(ROOT)}: {len(found) - before} calibration(s)")
    write_atomic(dp.CALIBRATIONS, json.dumps(dict(sorted(found.items())), indent=1) + "\n")
    print(f"{len(found)} noise multipliers -> {dp.CALIBRATIONS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
