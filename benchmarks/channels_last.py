"""Channels-last activations for the CNNs, measured per model: one SGD step's forward and backward with the
image batch as PyTorch lays it out (NCHW) against channels-last (NHWC) input, interleaved, one thread; for
the BHerd CNN also its gradient by hand (:mod:`fedaccel.models.conv_gradient`, channels-last pools).

For each built-in CNN and input shape it prints the median ratio channels-last / NCHW of the step time over
``--repeats`` alternated blocks, and the largest gap between the two gradients (the same numbers to float
rounding: the largest gap over the largest gradient entry). A ratio below 1 means channels-last is faster; fedaccel's models use the layout where it is
(a model class's ``CHANNELS_LAST``, read by the per-client engine), and the BHerd CNN its gradient by hand where
that is faster than both (``MAX_CHANNELS`` in ``fedaccel/models/conv_gradient.py``; "-" for the other models). One input channel (Fashion-MNIST) is the same memory in both
layouts, so only the first convolution's output could change layout there; ``--after-conv1`` times that too.

    python benchmarks/channels_last.py [--repeats 7] [--batch 50] [--threads 1] [--after-conv1] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from fedaccel.engine.flat import FlatModel
from fedaccel.models import build_model
from fedaccel.models.conv_gradient import bherd_cnn_gradient

CASES = [("cnn", (1, 28, 28)), ("cnn", (3, 32, 32)), ("lenet5", (1, 28, 28)), ("lenet5", (3, 32, 32)),
         ("feddc-cnn", (3, 32, 32))]
LAYOUTS = ("nchw", "channels_last", "by_hand", "after_conv1")


def step_fn(name: str, shape: tuple[int, ...], batch: int, layout: str,  # noqa: ANN201
            dtype: torch.dtype = torch.float32):
    """One step's gradient in ``layout``, or None where the model has no such step (``by_hand``)."""
    model = build_model(name, shape, 10, seed=0).to(dtype)
    flat = FlatModel(model)
    g = torch.Generator().manual_seed(0)
    x, y = torch.rand(batch, *shape, generator=g).to(dtype), torch.randint(0, 10, (batch,), generator=g)
    if layout == "by_hand":
        kernel = bherd_cnn_gradient(model, max_channels=shape[0])
        if kernel is None:
            return None
        labels = kernel.prepare(y)

        def by_hand() -> torch.Tensor:
            kernel(flat.theta, x, labels, flat.grad)
            return flat.grad

        return by_hand

    def forward() -> torch.Tensor:
        h = x if layout == "nchw" else x.contiguous(memory_format=torch.channels_last)
        for k, layer in enumerate(model.features):
            h = layer(h)
            if k == 0 and layout == "after_conv1":
                h = h.contiguous(memory_format=torch.channels_last)
        return model.classifier(h)

    def step() -> torch.Tensor:
        return flat.gradient(model.loss(forward(), y))

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--after-conv1", action="store_true", help="also time channels-last from conv1's output on")
    parser.add_argument("--smoke", action="store_true", help="one small case, 2 repeats (a test, not a measurement)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cases, block = CASES, 5
    if args.smoke:
        cases, args.repeats, args.batch, block = CASES[:1], 2, 4, 1
    layouts = LAYOUTS if args.after_conv1 else LAYOUTS[:3]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), batch {args.batch}, "
          f"load average {', '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print("| model | input | NCHW ms/step | " + " | ".join(f"{k} / NCHW" for k in layouts[1:]) + " | gradient gap / max gradient |")
    print("|---|---|---:|" + "---:|" * len(layouts[1:]) + "---:|")
    lines = []
    for name, shape in cases:
        steps = {layout: step_fn(name, shape, args.batch, layout) for layout in layouts}
        steps = {layout: step for layout, step in steps.items() if step is not None}
        grads = {layout: step().clone() for layout, step in steps.items()}  # warm-up and the equality check
        scale = float(grads["nchw"].abs().max())
        gap = max(float((grads[k] - grads["nchw"]).abs().max()) for k in steps if k != "nchw") / scale
        times: dict[str, list[float]] = {k: [] for k in steps}
        for _ in range(args.repeats):
            for layout, step in steps.items():
                started = time.perf_counter()
                for _ in range(block):
                    step()
                times[layout].append((time.perf_counter() - started) / block)
        ratios = [f"{statistics.median(a / b for a, b in zip(times[k], times['nchw'])):.3f}" if k in steps else "-"
                  for k in layouts[1:]]
        print(f"| {name} | {'x'.join(map(str, shape))} | {1e3 * statistics.median(times['nchw']):.1f} | "
              + " | ".join(ratios) + f" | {gap:.1e} |")
        exact = step_fn(name, shape, args.batch, "nchw", torch.float64)().clone()
        off = {k: float((grad.double() - exact).norm() / exact.norm()) for k, grad in grads.items()}
        lines.append(f"{name} {'x'.join(map(str, shape))}: float32 gradients' distance to the float64 one (relative): "
                     + ", ".join(f"{k} {v:.1e}" for k, v in off.items()))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
