"""What a stacked seed group pays besides its local steps, before and after its savings, measured in one run.

Every seed of ``fedaccel experiment --stack-seeds`` loads its dataset, and BHerd's paper grids evaluate every round
on the full test set and 5,000 training samples (``eval.train_samples``). Timed here, alternated, ``--repeats``
times (medians), on the embedded Fashion-MNIST:

- **load**: ``load_dataset("fashion-mnist")`` with the process's gunzipped files forgotten (as every seed paid it
  before) and kept (``fedaccel.data.idx``: the seeds after the first);
- **evaluate**: ``Federation.evaluate`` of the paper's squared-SVM, as it is (the training sample gathered once, when
  the federation is built) and as it was (the 5,000 samples gathered again every evaluation, then evaluated);
- **a group's rounds**: svm_case2's first group (FedAvg, 10 seeds stacked, T = ``--rounds``), its batches gathered
  from one copy of the seeds' equal training sets (``fedaccel.engine.stacked.SameData``) and from each seed's own;
  then, from one copy, its metrics and diagnostics rows fsynced as written (as before) and only before each
  checkpoint (``fedaccel.runs.loop._sync``: a resume drops the rows past its checkpoint anyway).

    python benchmarks/seed_group_overheads.py [--repeats 7] [--rounds 10] [--smoke]

``--smoke``: one repeat on 2,000 training samples and 2 seeds for 1 round, to check that the script runs (its figures
then mean nothing).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from fedaccel.data import idx, load_dataset
from fedaccel.runs.config import load_config
from fedaccel.runs.setup import build_setup


def seconds(work) -> float:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=10, help="rounds of the stacked group (default 10)")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    repeats = 1 if args.smoke else args.repeats
    torch.set_num_threads(1)
    print(f"load average (1, 5, 15 min) before: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")

    forgotten, kept = [], []
    for _ in range(repeats):
        idx._GUNZIPPED.clear()
        forgotten.append(seconds(lambda: load_dataset("fashion-mnist")))
        kept.append(seconds(lambda: load_dataset("fashion-mnist")))
    first, again = statistics.median(forgotten), statistics.median(kept)
    print(f"load fashion-mnist: gunzipped {first:.3f} s, kept {again:.3f} s; ratio kept/gunzipped: {again / first:.2f}")

    overrides = ["model=svm", "data.clients=5", "data.split=case2", "eval.train_samples=5000",
                 *(["data.subset=2000"] if args.smoke else [])]
    fed = build_setup(load_config(None, overrides)).federation
    theta = torch.full((fed.model.size,), 1e-3)
    x, y = fed.clean_train
    index = fed._train_eval_index

    def as_it_was() -> None:
        fed.evaluate(theta, train=False)
        fed._evaluate(*((x, y) if index is None else (x[index], y[index])))

    now, before = [], []
    for _ in range(repeats):
        now.append(seconds(lambda: fed.evaluate(theta)))
        before.append(seconds(as_it_was))
    a, b = statistics.median(now), statistics.median(before)
    print(f"evaluate svm ({len(fed.y_test):,} test + {len(y) if index is None else len(index):,} training samples): "
          f"gathered each time {b * 1e3:.1f} ms, once {a * 1e3:.1f} ms; ratio once/each time: {a / b:.2f}")
    group_rounds(1 if args.smoke else max(3, repeats // 2), 1 if args.smoke else args.rounds, args.smoke)
    print(f"load average (1, 5, 15 min) after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


def group_rounds(repeats: int, rounds: int, smoke: bool) -> None:
    """svm_case2's first stacked group for ``rounds`` rounds: batches gathered from each seed's own copy and from one
    (rows fsynced as written), then from one copy with the rows fsynced only before each checkpoint."""
    import sys
    import tempfile
    from pathlib import Path

    import fedaccel.engine.stacked as stacked
    import fedaccel.runs.loop as loop

    sys.path.insert(0, str(Path(__file__).parent))
    from paper_estimate import PAPER, timed_group

    more = ("data.subset=2000",) if smoke else ()
    settings = {"own copies": (False, True), "one copy": (True, True), "rows synced at checkpoints": (True, False)}
    times: dict[str, list[float]] = {name: [] for name in settings}
    with tempfile.TemporaryDirectory() as scratch:
        for n in range(repeats):
            for name, (share, sync_every_row) in settings.items():
                stacked.SHARE_SAME_DATA, loop.SYNC_EVERY_ROW = share, sync_every_row
                out = Path(scratch) / f"{len(times[name])}-{n}-{share}-{sync_every_row}"
                times[name].append(timed_group(PAPER / "svm_case2.yaml", 0, rounds, "cpu", 2 if smoke else None,
                                               out, more=more))
    own, one, synced = (statistics.median(times[name]) for name in settings)
    print(f"svm_case2 group, {rounds} rounds, each row fsynced: own copies {own:.2f} s, one copy {one:.2f} s; "
          f"ratio one/own: {one / own:.2f}")
    print(f"svm_case2 group, {rounds} rounds, one copy: each row fsynced {one:.2f} s, rows fsynced before each "
          f"checkpoint {synced:.2f} s; ratio: {synced / one:.2f}")

if __name__ == "__main__":
    main()
