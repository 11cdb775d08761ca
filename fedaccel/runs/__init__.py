"""One run: what every runtime needs to turn a config into a run folder.

- ``config``: the typed run config, loaded from YAML with ``--set`` overrides and checked;
- ``setup``: the federation (data, split, model) and the algorithm built from a config;
- ``folder``: a run folder's file names and a new folder's name;
- ``checkpoint``: saving a run's state atomically and restoring it (``--resume``);
- ``loop``: the round loop, writing metrics, diagnostics and checkpoints as it goes;
- ``lock``: one writer per run folder; ``stopping``: Ctrl-C/SIGTERM finish the round first;
- ``lifetime``: processes that die with their parent (``experiment -j`` workers, a deployment);
- ``tensorboard``: the optional event files.

The dispatcher that picks a runtime for a run (``run``, ``resume``) sits above this package and
the Flower runtimes, in :mod:`fedaccel.launch`.
"""
