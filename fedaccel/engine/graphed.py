"""A stacked chunk's local steps replayed as one CUDA graph.

On a GPU the stacked runtime's local step is a few dozen small kernels; at K >= 100 clients their launches,
not their arithmetic, set much of the pace. A chunk whose steps have static shapes (every row the same number of
full batches, no augmentation, no per-round tensors read by a local term or an estimator) runs the same
kernels every round on the same buffers, so its whole loop of steps is captured once as a CUDA graph and
replayed: one launch a round instead of tens a step.

The first round of a shape runs eagerly; the second runs eagerly too (its own numbers, on a side stream: the
warm-up a capture needs) and is then captured; every later round copies its start (K, d) and index table
(K, tau, b) into the graph's buffers and replays it. A replay runs the captured kernels with the captured
arguments, so its numbers are those of the eager loop bit for bit (tests/test_graphed.py). Only the SVM's
and the Linear/ReLU chains' kernels are captured (``KINDS``): other models run eagerly. A step size that
changes every round (``train.lr_decay``) never meets its shape twice and stays eager. ``FEDACCEL_CUDA_GRAPHS=0``
turns capture off; a capture that fails is said once and its shape stays eager.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

Steps = Callable[[Tensor, Tensor], None]  # (theta (K, d), index (K, tau, b)) -> None: theta moved in place

KINDS = ("svm", "linear")  # the kernels captured (fedaccel.engine.stacked.kernel_kind): their replays are bit for bit;
# a convolutional model's replay was within 7e-6 (relative) of its eager rounds on an H200 (cuDNN chooses its
# algorithm again under capture) and 5% faster: it stays eager, its numbers exactly today's
CAPACITY = 4  # graphs kept (each holds its step's intermediates in a private memory pool)


def enabled() -> bool:
    """Whether stacked chunks on a GPU may be captured (``FEDACCEL_CUDA_GRAPHS=0`` says no)."""
    return os.environ.get("FEDACCEL_CUDA_GRAPHS", "1") != "0"


@dataclass
class _Graph:
    graph: Any  # torch.cuda.CUDAGraph
    theta: Tensor
    index: Tensor
    keep: tuple[Any, ...]  # what the captured kernels read by address (the training data): kept alive


class GraphCache:
    """Captured step loops by shape key: ``run`` returns the chunk's final (K, d), or None to run eagerly."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self.graphs: OrderedDict[Hashable, _Graph] = OrderedDict()
        self.seen: OrderedDict[Hashable, bool] = OrderedDict()  # shapes met once (True) or refused (False)
        self.lock = threading.Lock()

    def run(self, key: Hashable, keep: tuple[Any, ...], steps: Steps, theta0: Tensor, index: Tensor,
            say: Callable[[str], None] = print) -> Tensor | None:
        """The steps from ``theta0`` on ``index``: replayed if captured, captured (after an eager warm-up
        that gives this round's numbers) at a shape's second sighting; None at its first, or if refused
        (a failed capture is said with ``say``). The tensor returned is the graph's own buffer, valid
        until the next call."""
        with self.lock:
            entry = self.graphs.get(key)
            if entry is not None:
                self.graphs.move_to_end(key)
                entry.theta.copy_(theta0)
                entry.index.copy_(index)
                with torch.cuda.device(theta0.device):
                    entry.graph.replay()
                return entry.theta
            if self.seen.get(key) is not True:  # first sighting, or a capture that failed
                if key not in self.seen:
                    self._remember(key, True)
                return None
            return self._capture(key, keep, steps, theta0, index, say)

    def _remember(self, key: Hashable, value: bool) -> None:
        self.seen[key] = value
        self.seen.move_to_end(key)
        while len(self.seen) > 64 * self.capacity:
            self.seen.popitem(last=False)

    def _capture(self, key: Hashable, keep: tuple[Any, ...], steps: Steps, theta0: Tensor, index: Tensor,
                 say: Callable[[str], None]) -> Tensor | None:
        with torch.cuda.device(theta0.device):  # the capture's streams and pool on the chunk's own GPU
            return self._capture_here(key, keep, steps, theta0, index, say)

    def _capture_here(self, key: Hashable, keep: tuple[Any, ...], steps: Steps, theta0: Tensor, index: Tensor,
                      say: Callable[[str], None]) -> Tensor | None:
        theta, static_index = theta0.clone(), index.clone()
        side = torch.cuda.Stream(device=theta.device)
        side.wait_stream(torch.cuda.current_stream(theta.device))
        with torch.cuda.stream(side):  # the warm-up a capture needs; these are this round's numbers
            steps(theta, static_index)
        torch.cuda.current_stream(theta.device).wait_stream(side)
        result = theta.clone()
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                steps(theta, static_index)
        except Exception as exc:  # noqa: BLE001 - an op that cannot be captured: this shape stays eager
            say(f"note: stacked runtime: a CUDA graph capture failed ({type(exc).__name__}: {exc}); "
                     "these chunks run eagerly")
            self._remember(key, False)
            return result
        self.graphs[key] = _Graph(graph, theta, static_index, keep)
        while len(self.graphs) > self.capacity:
            self.graphs.popitem(last=False)
        return result


GRAPHS = GraphCache()
