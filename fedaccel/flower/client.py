"""The fedaccel ClientApp: the client side of any composed algorithm, on a Flower SuperNode.

Message types (Flower's ``<category>.<action>``):

* ``query.hello``  carries the run's config (YAML). The client builds the run's setup once
  per process (data, split, model, algorithm: all deterministic from the seed), keeps the
  config and its part states in ``context.state``, and answers with its ``partition-id``.
* ``train.plan``   the planning phase (FedGSNR): statistics at the global model.
* ``train``        one round of local training: global model ``w``, the parts' server states,
  steps and whether to upload; the answer carries the update only if the client uploads
  (FedUMF's unauthorised clients train, store, and answer with an acknowledgement).

Per-client state (SCAFFOLD's c_i, FedDyn/FedDC drifts, FedUMF's stored update) never leaves the
client: it lives in Flower's ``Context`` between rounds.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import torch
import yaml
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from fedaccel.algorithms.base import ClientContext
from fedaccel.config import from_dict
from fedaccel.engine.round import round_info, train_client
from fedaccel.flower.wire import pack, unpack
from fedaccel.runner import Setup, apply_attacks, build_setup

STATE = "fedaccel.client."  # prefix of the client's part states in context.state
SERVER = "fedaccel.server."  # prefix of the parts' server states in a train message
UPDATE = "fedaccel.update."  # prefix of an upload
PLAN = "fedaccel.plan."  # prefix of a planning answer

_SETUPS: dict[str, Setup] = {}  # per process: a SuperNode's ClientApp process serves many rounds


def setup_for(config_text: str) -> Setup:
    """The run's setup, built once per process and config."""
    key = hashlib.sha256(config_text.encode()).hexdigest()
    if key not in _SETUPS:
        _SETUPS.clear()
        _SETUPS[key] = build_setup(from_dict(yaml.safe_load(config_text)))
    return _SETUPS[key]


def global_model(content: RecordDict) -> torch.Tensor:
    return torch.from_numpy(content["arrays"]["w"].numpy().copy())


app = ClientApp()


@app.query("hello")
def hello(message: Message, context: Context) -> Message:
    config_text = str(message.content["config"]["yaml"])
    client = int(context.node_config["partition-id"])
    setup = setup_for(config_text)
    if not 0 <= client < setup.federation.n_clients:
        raise ValueError(f"partition-id {client} but the run has {setup.federation.n_clients} clients")
    known = context.state.get("fedaccel")
    if known is None or known["config"] != config_text:  # a new run: fresh part states
        context.state["fedaccel"] = ConfigRecord({"config": config_text, "client": client})
        pack(setup.algorithm.init_client(setup.federation.model.theta.clone()), into=context.state, prefix=STATE)
    reply = RecordDict({"hello": ConfigRecord({"client": client, "pid": os.getpid()})})
    return Message(reply, reply_to=message)


def _prepare(message: Message, context: Context) -> tuple[Setup, ClientContext, torch.Tensor, tuple[Any, ...]]:
    known = context.state["fedaccel"]
    setup = setup_for(str(known["config"]))
    content = message.content
    round_ = int(content["config"]["round"])
    apply_attacks(setup, round_)  # malicious clients' data, as in process
    ctx = ClientContext(
        round_info(setup.federation, round_),
        int(known["client"]),
        int(content["config"]["steps"]),
        bool(content["config"]["uploads"]),
        json.loads(str(content["config"]["instructions"])),
    )
    return setup, ctx, global_model(content), tuple(unpack(content, prefix=SERVER))


@app.train("plan")
def plan(message: Message, context: Context) -> Message:
    setup, ctx, w, server = _prepare(message, context)
    k, part = setup.algorithm.single("plan_server")  # type: ignore[misc]
    client_state = tuple(unpack(context.state, prefix=STATE))
    answer = part.plan_client(ctx, w, server[k], client_state[k], setup.federation.access(ctx.client))  # type: ignore[misc]
    return Message(pack(answer, prefix=PLAN), reply_to=message)


@app.train()
def train(message: Message, context: Context) -> Message:
    setup, ctx, w, server = _prepare(message, context)
    client_state = tuple(unpack(context.state, prefix=STATE))
    new_state, update = train_client(setup.algorithm, ctx, w, server, client_state, setup.federation)
    pack(new_state, into=context.state, prefix=STATE)
    reply = RecordDict({"metrics": MetricRecord({"num-examples": len(setup.federation.partition[ctx.client]),
                                                  "steps": ctx.steps})})
    if ctx.uploads:
        pack({"delta": update.delta, "extras": update.extras, "diag": update.diag}, into=reply, prefix=UPDATE)
    return Message(reply, reply_to=message)


def train_content(w: torch.Tensor, server: tuple[Any, ...], ctx: ClientContext) -> RecordDict:
    """What the server sends with ``train`` and ``train.plan``."""
    content = RecordDict({
        "arrays": ArrayRecord({"w": Array(w.detach().numpy())}),
        "config": ConfigRecord({
            "round": ctx.info.round, "steps": ctx.steps, "uploads": ctx.uploads,
            "instructions": json.dumps(dict(ctx.instructions)),
        }),
    })
    return pack(server, into=content, prefix=SERVER)
