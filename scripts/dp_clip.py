"""The clip S of an experiment under client-level DP, measured on a tuning seed (never a judged one).

Runs round 1 of each method of an experiment file without DP (its cells without ``algorithm.dp``, one per method)
on ``--seed`` and prints the median and the spread of the uploads' norms ||delta_k||: the privacy report's S is
FedAvg's median (experiments/privacy/quick/*.yaml say which).

    PYTHONPATH=. python scripts/dp_clip.py experiments/privacy/quick/dp_many.yaml [--seed 100]
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from dp_fedgsnr_clips import recorded  # the same folder: its watched mean
from fedaccel.engine.round import init_state, run_round
from fedaccel.grids.experiment import load_experiment
from fedaccel.runs.config import load_config
from fedaccel.runs.setup import build_setup


def upload_norms(sections: dict, seed: int) -> list[float]:
    """The norms of round 1's uploads of the config ``sections`` on ``seed``."""
    sections = {**sections, "run": {**sections["run"], "seed": seed, "progress": False},
                "train": {**sections["train"], "rounds": 1}}
    setup = build_setup(load_config(None, [f"{key}={json.dumps(value)}" for key, value in sections.items()]))
    norms: list[float] = []
    algorithm = recorded(setup.algorithm, norms, {})
    state = init_state(algorithm, setup.federation.model.theta.clone(), len(setup.federation.partition))
    run_round(algorithm, state, setup.federation, fraction=setup.config.train.client_fraction, stream=False)
    return norms


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("experiment")
    parser.add_argument("--seed", type=int, default=100)
    args = parser.parse_args()
    seen: set[str] = set()
    for _, config in load_experiment(args.experiment).cells:
        sections = config.to_dict()
        method = json.dumps(sections["algorithm"], sort_keys=True)
        if "dp" in sections["algorithm"] or method in seen:
            continue
        seen.add(method)
        norms = upload_norms(sections, args.seed)
        print(f"{method}: seed {args.seed}, round 1, {len(norms)} uploads: median norm {np.median(norms):.4g} "
              f"(quartiles {np.quantile(norms, 0.25):.4g}, {np.quantile(norms, 0.75):.4g})")


if __name__ == "__main__":
    main()
