"""The ClientApp: train the received model on this node's partition, send it back (Message API)."""

from __future__ import annotations

from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from peersapp.task import build_net, load_partition, train

app = ClientApp()


@app.train()
def train_fn(msg: Message, context: Context) -> Message:
    cfg = context.run_config
    net = build_net(cfg)
    net.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    loader = load_partition(cfg, int(context.node_config["partition-id"]))
    loss = train(net, loader, int(cfg["local-epochs"]), float(msg.content["config"]["lr"]))
    content = RecordDict({"arrays": ArrayRecord(net.state_dict()),
                          "metrics": MetricRecord({"train_loss": loss, "num-examples": len(loader.dataset)})})
    return Message(content=content, reply_to=msg)
