"""Grids of runs: experiment files and how their cells are run.

- ``experiment``: an experiment file's grid of configs, run or resumed cell by cell, then its
  curves and rounds-to-target table;
- ``cell``: one cell's worker, shared by every way of running cells;
- ``pool``: cells in ``-j N`` worker processes; ``ray_tasks``: cells as Ray tasks;
- ``progress``: which experiment and cells run, with an ETA.
"""
