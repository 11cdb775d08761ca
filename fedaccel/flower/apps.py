"""The Flower App components for the deployment runtime (``fedaccel deploy``, or by hand).

``server_app`` reads the run folder from the run config (``run-dir``: the resolved config is
its ``config.yaml``, e.g. from ``fedaccel deploy --prepare``) and serves the run there (only a run
whose run config's ``run-token`` is the folder's: :func:`~fedaccel.flower.security.check_run_token`), holding
the folder's lock (:mod:`fedaccel.runs.lock`: a second writer is refused, and refuses it); it logs
one line per round, and a user's mistake as one ``error: ...`` line (no traceback), which
``flwr run --stream`` shows. Run config ``connect-timeout``: seconds to wait for the SuperNodes
(0: the default, see :func:`fedaccel.flower.server.serve`). ``client_app`` is
:mod:`fedaccel.flower.client`'s.
"""

from __future__ import annotations

from pathlib import Path

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedaccel.errors import UserError
from fedaccel.flower.client import app as client_app
from fedaccel.flower.security import check_run_token
from fedaccel.flower.server import RoundLines, log, serve
from fedaccel.runs.finished import said_finished
from fedaccel.runs.config import from_dict, read_yaml
from fedaccel.runs.lock import lock_run_dir
from fedaccel.runs.stopping import Interrupted

server_app = ServerApp()


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    from fedaccel.flower.node import shorten_object_pull_backoff

    shorten_object_pull_backoff()  # this is the flwr-serverapp process: pull its replies promptly
    run_dir = Path(str(context.run_config["run-dir"]))
    try:
        if not str(context.run_config["run-dir"]):
            raise UserError("no run folder: flwr run APP CONNECTION --run-config RUN_DIR/flower/secrets/run-config.toml "
                            "(`fedaccel deploy --prepare --tls DIR CONFIG --out RUN_DIR` makes it)")
        check_run_token(run_dir, context.run_config.get("run-token"))  # before the folder is touched
        timeout = float(context.run_config.get("connect-timeout", 0)) or None  # type: ignore[arg-type]
        with lock_run_dir(run_dir):  # this process writes the run folder: one writer, on every runtime
            config = from_dict(read_yaml(run_dir / "config.yaml"))
            if said_finished(run_dir, config):  # the same `flwr run` again: it said "resuming ... rounds 6-5"
                return
            serve(grid, config, run_dir, progress=RoundLines, connect_timeout=timeout)
    except Interrupted as stopped:
        log(f"interrupted at round {stopped.round}; the same `flwr run` (run-dir '{run_dir}') continues")
    except UserError as exc:
        log(f"error: {exc}")


__all__ = ["client_app", "server_app"]
