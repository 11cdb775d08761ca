"""The Flower App components for the deployment runtime (``fedaccel deploy``).

``server_app`` reads the run folder from the run config (``run-dir``: the resolved config is
its ``config.yaml``) and serves the run there; ``client_app`` is :mod:`fedaccel.flower.client`'s.
"""

from __future__ import annotations

from pathlib import Path

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedaccel.config import from_dict, read_yaml
from fedaccel.flower.client import app as client_app
from fedaccel.flower.server import serve

server_app = ServerApp()


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    from fedaccel.flower.node import shorten_object_pull_backoff

    shorten_object_pull_backoff()  # this is the flwr-serverapp process: pull its replies promptly
    run_dir = Path(str(context.run_config["run-dir"]))
    serve(grid, from_dict(read_yaml(run_dir / "config.yaml")), run_dir, progress=False)


__all__ = ["client_app", "server_app"]
