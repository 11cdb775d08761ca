"""The clips of experiments/privacy/quick/dp_fedgsnr.yaml, measured on tuning seed 100 (never a judged seed).

Runs round 1 of the grid's base setting without DP for FedAvg and FedGSNR (samples 64, e_const 20) and prints the
medians over the 10 clients of: each method's upload norm ||delta_k|| (S), and FedGSNR's planning statistics
||g_k|| (C_g), ||s_k|| with s_k = v_k + g_k^2 (C_s) and n_k (n_max) at the uniform, noise-free global statistics
the private plan would release (fedaccel.algorithms.dp_plan with z = 0).

    PYTHONPATH=. python scripts/dp_fedgsnr_clips.py [--seed 100]
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import numpy as np
import torch

from fedaccel.algorithms.base import Algorithm, Part
from fedaccel.algorithms.dp_plan import own_ratio
from fedaccel.engine.round import init_state, run_round
from fedaccel.runs.config import load_config
from fedaccel.runs.setup import build_setup

def recorded(algorithm: Algorithm, norms: list[float], messages: dict) -> Algorithm:
    """``algorithm`` with its mean and plan watched: upload norms and planning messages recorded."""
    parts = []
    for part in algorithm.parts:
        if part.aggregate is not None:
            aggregate = part.aggregate

            def watch(info, w, updates, aggregate=aggregate):  # type: ignore[no-untyped-def]
                norms.extend(float(torch.linalg.vector_norm(u.delta.double())) for u in updates)
                return aggregate(info, w, updates)
            part = replace(part, aggregate=watch, aggregate_fold=None)
        if part.plan_server is not None:
            plan_server = part.plan_server

            def plan(info, found, ss, plan_server=plan_server):  # type: ignore[no-untyped-def]
                messages.update(found)
                return plan_server(info, found, ss)
            part = replace(part, plan_server=plan)
        parts.append(part)
    return Algorithm(algorithm.name, tuple(parts))


def round_one(algorithm: str, seed: int) -> tuple[list[float], dict]:
    overrides = [f"algorithm={algorithm}", f"run.seed={seed}", "train.rounds=1", "run.progress=false"]
    config = load_config(None, BASE + overrides)
    setup = build_setup(config)
    norms: list[float] = []
    messages: dict = {}
    algo = recorded(setup.algorithm, norms, messages)
    state = init_state(algo, setup.federation.model.theta.clone(), len(setup.federation.partition))
    run_round(algo, state, setup.federation, stream=False)
    return norms, messages


BASE = [  # experiments/field/quick/fedgsnr_nonbalance.yaml's base, which dp_fedgsnr.yaml shares
        "model={name: 2nn, hidden: 100}",
        "data={dataset: fashion-mnist, clients: 10, test_subset: 2000, split: nonbalance}",
        "train={rounds: 50, lr: 0.05, batch_size: 64, local_steps: 20}", "eval={every: 1, train_samples: 1000}"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=100)
    seed = parser.parse_args().seed
    fedavg, _ = round_one("fedavg", seed)
    gsnr, messages = round_one("{name: fedgsnr, samples: 64, e_const: 20}", seed)
    g = {k: m["mean"].double().numpy() for k, m in messages.items()}
    v = {k: m["var"].double().numpy() for k, m in messages.items()}
    s = {k: v[k] + g[k] ** 2 for k in g}
    g_bar = np.mean([g[k] for k in g], axis=0)
    v_bar = np.maximum(0.0, np.mean([s[k] for k in s], axis=0) - g_bar**2)
    n = [own_ratio(g[k], v[k], g_bar, v_bar, 64)[0] for k in sorted(g)]
    print(f"seed {seed}, round 1, medians over {len(g)} clients")
    print(f"FedAvg upload norm   {np.median(fedavg):.4g}  (all: {np.round(sorted(fedavg), 4).tolist()})")
    print(f"FedGSNR upload norm  {np.median(gsnr):.4g}  (all: {np.round(sorted(gsnr), 4).tolist()})")
    print(f"||g_k||              {np.median([np.linalg.norm(x) for x in g.values()]):.4g}")
    print(f"||s_k||              {np.median([np.linalg.norm(x) for x in s.values()]):.4g}")
    print(f"n_k                  {np.median(n):.4g}  (all: {np.round(sorted(n), 3).tolist()})")


if __name__ == "__main__":
    main()
