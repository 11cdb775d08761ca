"""fedaccel: federated learning on non-IID data, with composable algorithms.

The CLI (``fedaccel --help``) and this API do the same things:

- :func:`train` - your own ``torch.nn.Module`` and data (tensors + one index array per client);
- :func:`load_config`, :func:`run`, :func:`resume` - config-driven runs that write a run folder;
- :func:`load_experiment`, :func:`run_experiment` - grids of runs with curves and tables;
- :func:`compose`, :class:`Part`, :func:`build_algorithm` - build or combine algorithms.
"""

from fedaccel.algorithms.base import Algorithm, Part, compose
from fedaccel.algorithms.registry import RECIPES, build_algorithm
from fedaccel.api import History, train
from fedaccel.grids.experiment import load_experiment, run_experiment
from fedaccel.launch import resume, run
from fedaccel.runs.config import Config, load_config

__all__ = [
    "Algorithm",
    "Config",
    "History",
    "Part",
    "RECIPES",
    "build_algorithm",
    "compose",
    "load_config",
    "load_experiment",
    "resume",
    "run",
    "run_experiment",
    "train",
]
__version__ = "0.1.0"
