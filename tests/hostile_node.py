"""``python tests/hostile_node.py [flower-supernode arguments]``: fedaccel's SuperNode (``fedaccel.flower.node``)
whose client uploads a finite delta of 3e38 per coordinate, of the right shape and dtype, every round.

A participant runs whatever code it likes on its own host; this is the smallest such code that took a whole
run down before issue 47 (the aggregate overflowed at round 1). Used by tests/test_flower.py's deployment test.
"""

from __future__ import annotations

import dataclasses
import sys

import torch

from fedaccel.flower import client
from fedaccel.flower.node import main

honest = client.train_client


def huge(*args, **kwargs):  # type: ignore[no-untyped-def]
    state, update = honest(*args, **kwargs)
    return state, dataclasses.replace(update, delta=torch.full_like(update.delta, 3e38))


if __name__ == "__main__":
    client.train_client = huge  # looked up when `train` runs: the reply is packed from this update
    sys.exit(main())
