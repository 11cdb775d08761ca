"""The ServerApp: Flower's FedAvg strategy, every node every round, a server-side evaluate_fn.

The rounds' metrics go to the run config's ``out`` (JSON), for benchmarks/peers.py to compare, with
the time each round's evaluation ended (round 0: the initial model's, before any training).
"""

from __future__ import annotations

import json
import time

from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from peersapp.task import build_net, evaluate

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    clients = int(cfg["clients"])
    net = build_net(cfg)

    def global_evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        net.load_state_dict(arrays.to_torch_state_dict())
        accuracy, loss = evaluate(net, cfg)
        return MetricRecord({"test_acc": accuracy, "train_loss": loss, "time": time.time()})

    strategy = FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=clients, min_available_nodes=clients)
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(net.state_dict()),
                            num_rounds=int(cfg["num-server-rounds"]),
                            train_config=ConfigRecord({"lr": float(cfg["lr"])}), evaluate_fn=global_evaluate)
    if cfg["out"]:
        rows = {int(r): dict(m) for r, m in result.evaluate_metrics_serverapp.items()}
        with open(str(cfg["out"]), "w") as f:
            json.dump(rows, f)
