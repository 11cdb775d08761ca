"""A round's uploads summed by Flower's SecAgg+: the ServerApp receives their weighted mean only.

``run.secure_aggregation`` (:mod:`fedaccel.runs.secure`) splits a round in two on the Flower runtimes:

1. fedaccel's ``train`` message, marked ``secure``: each client trains as always, keeps its upload in
   its node's context and answers with an empty acknowledgement (so the runtime learns who is lost);
2. :func:`secure_mean`: Flower's ``SecAggPlusWorkflow`` over the clients that trained. Its legacy
   strategy (:class:`OneRound`) hands each client a ``FitIns`` carrying only its integer weight; the
   client's ``train`` handler, behind Flower's ``secaggplus_mod`` (:func:`secure_mod`), answers with its
   kept delta as a ``FitRes``, which the mod quantises, masks and uploads. The workflow unmasks the sum
   and passes the weighted mean to ``OneRound.aggregate_fit``; nothing else about any one update
   reaches the server.

The weights are the aggregator's own (``p_i`` as the sample count ``n_i``, or 1 for a uniform mean),
so the mean is the one the plain run computes, up to SecAgg+'s quantisation (docs: Secure aggregation).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.client.mod import secaggplus_mod
from flwr.clientapp.typing import ClientAppCallable
from flwr.common import Code, FitIns, FitRes, Parameters, Status, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS
from flwr.compat.common import recorddict_compat as compat
from flwr.server.compat.grid_client_proxy import GridClientProxy
from flwr.server.client_manager import SimpleClientManager
from flwr.server.compat.legacy_context import LegacyContext
from flwr.server.strategy import Strategy
from flwr.server.workflow import SecAggPlusWorkflow
from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD, Key

from fedaccel.runs.secure import SecureAggregation

WEIGHT = "fedaccel.weight"  # the client's integer weight n_i in its FitIns config
RATIO = "fedaccel.ratio"  # n_i / max_weight: what SecAgg+ multiplies the delta by before clipping
CLIP = "fedaccel.clip"  # the clipping range, so that a client can say when its update is clipped
FIT_CONFIG = "fitins.config"  # Flower's record of a FitIns config: marks the workflow's masking stage


class OneRound(Strategy):
    """The legacy strategy ``SecAggPlusWorkflow`` drives, for one round: ``configure_fit`` asks the
    given nodes for their kept uploads with their weights, ``aggregate_fit`` keeps the unmasked mean
    (every result carries the same aggregate: the workflow never had another)."""

    def __init__(self, proxies: dict[int, GridClientProxy], weights: dict[int, int], clip: float) -> None:
        self.proxies, self.weights, self.clip = proxies, weights, clip
        self.mean: list[np.ndarray] | None = None
        self.summed: list[int] = []  # node ids whose masked vectors the sum holds
        self.failures: list[str] = []

    def initialize_parameters(self, client_manager: Any) -> Parameters | None:
        return None

    def configure_fit(self, server_round: int, parameters: Parameters, client_manager: Any) -> list[tuple[Any, FitIns]]:
        empty = ndarrays_to_parameters([])
        top = max(self.weights.values())
        return [(proxy, FitIns(empty, {WEIGHT: self.weights[node], RATIO: self.weights[node] / top, CLIP: self.clip}))
                for node, proxy in self.proxies.items()]

    def aggregate_fit(self, server_round: int, results: list[tuple[Any, FitRes]],
                      failures: list[Any]) -> tuple[Parameters | None, dict[str, Any]]:
        self.failures = [str(f) for f in failures]
        self.summed = sorted(proxy.node_id for proxy, _ in results)
        if results:
            self.mean = parameters_to_ndarrays(results[0][1].parameters)
        return None, {}

    def configure_evaluate(self, server_round: int, parameters: Parameters, client_manager: Any) -> list[Any]:
        return []

    def aggregate_evaluate(self, server_round: int, results: list[Any], failures: list[Any]) -> tuple[None, dict]:
        return None, {}

    def evaluate(self, server_round: int, parameters: Parameters) -> None:
        return None


Exchange = Callable[[Any, list[Message], float], list[tuple[Message | None, float]]]


class Exchanging:
    """The grid as the workflow sees it: ``send_and_receive`` by the runtime's ``exchange``
    (fedaccel.flower.server's: a pull every 50 ms, not Flower's 3 s on a SuperLink), each stage
    waiting up to ``timeout`` s."""

    def __init__(self, grid: Any, exchange: Exchange, timeout: float) -> None:
        self.grid, self.exchange, self.timeout = grid, exchange, timeout

    def send_and_receive(self, messages: list[Message], *, timeout: float | None = None) -> list[Message]:
        return [reply for reply, _ in self.exchange(self.grid, list(messages), self.timeout) if reply is not None]


def secure_mean(grid: Any, exchange: Exchange, settings: SecureAggregation, weights: dict[int, int], round_: int,
                timeout: float) -> OneRound:
    """Run SecAgg+ over the nodes of ``weights`` (node id -> integer weight n_i) for round ``round_``
    (0-based), its messages sent by ``exchange(grid, messages, timeout)``; the returned strategy holds
    the weighted mean (None if the protocol halted: fewer clients left than it needs), the nodes it
    sums and the failures."""
    run_id = 0  # the workflow reads neither the proxies' run nor the context's
    proxies = {node: GridClientProxy(node, grid, run_id) for node in weights}
    strategy = OneRound(proxies, weights, settings.clipping_range)
    state = RecordDict({MAIN_CONFIGS_RECORD: ConfigRecord({Key.CURRENT_ROUND: round_ + 1}),
                        MAIN_PARAMS_RECORD: ArrayRecord()})
    manager = SimpleClientManager()  # the workflow logs how many it sampled "out of" the manager's (0 when empty)
    for proxy in proxies.values():
        manager.register(proxy)
    context = LegacyContext(Context(run_id=run_id, node_id=0, node_config={}, state=state, run_config={}),
                            strategy=strategy, client_manager=manager)
    workflow = SecAggPlusWorkflow(
        num_shares=settings.num_shares, reconstruction_threshold=settings.reconstruction_threshold,
        max_weight=float(max(weights.values())), clipping_range=settings.clipping_range,
        quantization_range=settings.quantization_range, modulus_range=settings.modulus_range, timeout=timeout,
    )
    workflow(Exchanging(grid, exchange, timeout), context)  # type: ignore[arg-type]
    return strategy


def integer_weights(coefficients: dict[int, float], sizes: dict[int, int]) -> dict[int, int]:
    """The aggregator's coefficients c_i as SecAgg+'s integer weights: the sample counts n_i where
    c_i is proportional to them (data weighting), 1 where all c_i are equal (a uniform mean)."""
    values = list(coefficients.values())
    if all(c == values[0] for c in values):
        return {client: 1 for client in coefficients}
    return {client: sizes[client] for client in coefficients}


# --- the client side ---------------------------------------------------------------------------

def masking_stage(message: Message) -> bool:
    """Whether ``message`` is the workflow's masking stage (a legacy ``FitIns`` with SecAgg+'s configs,
    which ``secaggplus_mod`` passes on), not fedaccel's train. A ``FitIns`` without them would have the
    handler answer with its delta unmasked: it is refused."""
    records = message.content.config_records
    if FIT_CONFIG in records and RECORD_KEY_CONFIGS not in records:
        raise ValueError("a request for the kept update outside SecAgg+: refused")
    return FIT_CONFIG in records


def fitres_content(delta: np.ndarray, message: Message) -> RecordDict:
    """The kept delta as the ``FitRes`` the SecAgg+ mod masks, with the weight ``message`` gives:
    float64, so that its quantisation is the only rounding (float32 has 24 bits, about the
    quantisation's 22). Coordinates that SecAgg+ will clip are said on the client's stderr."""
    config = message.content.config_records[FIT_CONFIG]
    delta = np.asarray(delta, dtype=np.float64)
    clip, ratio = float(config[CLIP]), float(config[RATIO])  # type: ignore[arg-type]
    clipped = int(np.count_nonzero(np.abs(delta * ratio) > clip))
    if clipped:
        print(f"fedaccel client: {clipped} coordinate(s) of this update exceed run.secure_aggregation.clipping_range "
              f"{clip:g} and are clipped by SecAgg+: the mean is biased; raise clipping_range", file=sys.stderr,
              flush=True)
    res = FitRes(Status(Code.OK, ""), ndarrays_to_parameters([delta]), int(config[WEIGHT]), {})  # type: ignore[arg-type]
    return compat.fitres_to_recorddict(res, keep_input=False)


def secure_mod(message: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """Flower's ``secaggplus_mod`` on the workflow's messages (they carry its configs), fedaccel's
    ``train`` handler alone on the others."""
    if RECORD_KEY_CONFIGS in message.content.config_records:
        return secaggplus_mod(message, context, call_next)
    return call_next(message, context)


def mean_of(strategy: OneRound) -> np.ndarray | None:
    return None if strategy.mean is None else np.asarray(strategy.mean[0])

