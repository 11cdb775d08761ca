"""Flower runtimes: the same composed algorithms, with clients as Flower SuperNodes.

``run.runtime: flower-simulation`` runs them on Flower's simulation engine (Ray); ``fedaccel
deploy`` on a SuperLink and SuperNodes (separate processes, or hosts). Both write the run folder
of the in-process runtime. :mod:`fedaccel.flower.wire` is what crosses the network.
"""

import re

# For every Flower process: no telemetry, no update check, and no `uv` re-install of the app's
# dependencies at run time (it would fetch a CUDA torch).
ENV = {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
       "FLWR_DISABLE_UPDATE_CHECK": "1", "PYTHONUNBUFFERED": "1"}

# Shared by the ServerApp (fedaccel.flower.server) and `fedaccel deploy`, which must not import it
# (torch, Flower) before its processes are started.
STOP_FILE = "stop"  # RUN_DIR/stop: finish the current round, checkpoint it and stop
SERVER_PREFIX = "fedaccel server: "  # what the server's lines start with
ROUND_LINE = re.compile(rf"^{re.escape(SERVER_PREFIX)}round (\d+)/(\d+)(?:  test_acc (\S+))?")
