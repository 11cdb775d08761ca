"""fedaccel: federated learning on non-IID data, with composable algorithms.

The CLI (``fedaccel --help``) and this API do the same things:

- :func:`train` - your own ``torch.nn.Module`` and data (tensors + one index array per client);
- :func:`load_config`, :func:`run`, :func:`resume` - config-driven runs that write a run folder;
  :func:`check_resume` - a config stopped and resumed gives the numbers of the whole run;
- :func:`load_experiment`, :func:`run_experiment` - grids of runs with curves and tables;
- :func:`compose`, :class:`Part`, :func:`build_algorithm` - build or combine algorithms.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fedaccel.algorithms.base import Algorithm, Part, compose
    from fedaccel.algorithms.registry import RECIPES, build_algorithm
    from fedaccel.api import History, train
    from fedaccel.grids.experiment import load_experiment, run_experiment
    from fedaccel.launch import check_resume, resume, run
    from fedaccel.runs.config import Config, load_config

# Imported when first used (PEP 562), so that `import fedaccel.cli` and the light modules do not
# load torch and every layer: a command that starts other processes (deploy) starts them sooner.
_WHERE = {
    "Algorithm": "fedaccel.algorithms.base", "Part": "fedaccel.algorithms.base", "compose": "fedaccel.algorithms.base",
    "RECIPES": "fedaccel.algorithms.registry", "build_algorithm": "fedaccel.algorithms.registry",
    "History": "fedaccel.api", "train": "fedaccel.api",
    "load_experiment": "fedaccel.grids.experiment", "run_experiment": "fedaccel.grids.experiment",
    "resume": "fedaccel.launch", "run": "fedaccel.launch", "check_resume": "fedaccel.launch",
    "Config": "fedaccel.runs.config", "load_config": "fedaccel.runs.config",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'fedaccel' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})  # a name already imported is in both


__all__ = [
    "Algorithm",
    "Config",
    "History",
    "Part",
    "RECIPES",
    "build_algorithm",
    "check_resume",
    "compose",
    "load_config",
    "load_experiment",
    "resume",
    "run",
    "run_experiment",
    "train",
]
__version__ = "0.1.0"
