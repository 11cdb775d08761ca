"""``run.secure_aggregation``: Flower's SecAgg+ on the Flower runtimes, and who may use it.

The settings are SecAgg+'s own (Bell et al., CCS 2020; ``flwr.server.workflow.SecAggPlusWorkflow``):
each client's weighted delta is clipped to ``[-clipping_range, clipping_range]`` per coordinate,
stochastically rounded onto ``quantization_range`` levels, masked, and only the sum is unmasked.
``num_shares`` and ``reconstruction_threshold`` are Flower's (an int: a count; a float: a fraction
of the round's clients, resp. of the shares). The server then sees the round's weighted mean of
the deltas and nothing else, so only recipes whose server step needs nothing else may use it:
:func:`refusal` says why a run may not, in one line (docs: Secure aggregation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedaccel.errors import ConfigError, shown


@dataclass(frozen=True)
class SecureAggregation:
    """SecAgg+'s parameters, as ``SecAggPlusWorkflow`` takes them."""

    clipping_range: float = 8.0
    quantization_range: int = 1 << 22
    modulus_range: int = 1 << 32
    num_shares: int | float = 1.0  # every client shares its keys with all the round's others
    reconstruction_threshold: int | float = 0.5  # of the shares: up to half the neighbours may drop


def parse_secure(raw: dict[str, Any] | None) -> SecureAggregation | None:
    """``run.secure_aggregation`` (a mapping of :class:`SecureAggregation`'s fields, ``{}`` for the
    defaults, or null: off), checked with one line per mistake."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ConfigError(f"run.secure_aggregation must be a mapping or null, got {shown(raw)}")
    known = SecureAggregation.__dataclass_fields__
    for key in raw:
        if key not in known:
            raise ConfigError(f"run.secure_aggregation has no option {shown(key)}; known: {', '.join(known)}")
    settings = SecureAggregation(**raw)
    c, q, m = settings.clipping_range, settings.quantization_range, settings.modulus_range
    checks = [
        (_number(c) and c > 0, "clipping_range must be a number > 0"),
        (_integer(q) and q >= 2, "quantization_range must be an integer >= 2"),
        (_integer(m) and q < m <= 1 << 32 and m & (m - 1) == 0,
         "modulus_range must be a power of 2 above quantization_range, at most 2**32"),
        (_integer(settings.num_shares) and settings.num_shares > 2 or  # type: ignore[operator]
         isinstance(settings.num_shares, float) and 0 < settings.num_shares <= 1,
         "num_shares must be an integer > 2 or a fraction in (0, 1]"),
        (_integer(settings.reconstruction_threshold) and settings.reconstruction_threshold >= 2 or  # type: ignore[operator]
         isinstance(settings.reconstruction_threshold, float) and 0 < settings.reconstruction_threshold <= 1,
         "reconstruction_threshold must be an integer >= 2 or a fraction in (0, 1]"),
    ]
    for ok, message in checks:
        if not ok:
            raise ConfigError(f"run.secure_aggregation: {message}")
    if _integer(settings.num_shares) and _integer(settings.reconstruction_threshold) and \
            settings.reconstruction_threshold >= settings.num_shares:  # type: ignore[operator]
        raise ConfigError("run.secure_aggregation: reconstruction_threshold must be below num_shares")
    return settings


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def refusal(runtime: str, algorithm: Any, eval_models: list[str]) -> str | None:
    """Why a run may not use secure aggregation (None: it may). The server sees only the weighted
    mean of the round's deltas, so: a Flower runtime, the mean as the aggregator (not FedNova's
    normalised one, a robust rule or DP's clipped mean), no server state built from individual
    uploads (SCAFFOLD, FedDyn, FedDC), no planning answers (FedGSNR), no choice of who uploads
    (FedUMF), no server-side adjustment of each update (GraB-FedAvg), no per-client model scored."""
    name = algorithm.name
    if not runtime.startswith("flower"):
        return (f"run.secure_aggregation needs a Flower runtime (flower-simulation or flower-deployment), not "
                f"{runtime}: without a network there is nobody to hide the updates from")
    aggregate = algorithm.single("aggregate")
    if aggregate is not None and aggregate[1].name == "dp":
        return (f"run.secure_aggregation: {name} with algorithm.dp: client-level DP's aggregate (each upload "
                "clipped on the server with server noise, checked for extras with client noise, summed over the "
                "expected number of uploads) is not SecAgg+'s weighted mean; DP with secure aggregation is not "
                "supported yet")
    if aggregate is None or aggregate[1].name != "mean":
        which = aggregate[1].name if aggregate else "none"
        return (f"run.secure_aggregation: {name} aggregates with {which}, which needs the individual updates; "
                "SecAgg+ gives the server only their weighted mean")
    for stage, why in (("plan_server", "plans from each client's own answer"),
                       ("server_adjust", "adjusts each client's update on the server"),
                       ("participation", "chooses who uploads")):
        for _, part in algorithm.with_stage(stage):
            return f"run.secure_aggregation: {name}'s {part.name} {why}, which SecAgg+ hides from the server"
    for _, part in algorithm.with_stage("client_end"):
        return (f"run.secure_aggregation: {name}'s {part.name} uploads more than the delta (extras), which "
                "SecAgg+ would not sum")
    for _, part in algorithm.with_stage("server_end"):
        if not part.models_only:
            return (f"run.secure_aggregation: {name}'s {part.name} reads the individual uploads in its server_end, "
                    "which SecAgg+ hides from the server (a part whose server_end reads only w and w_next declares "
                    "Part.models_only)")
    extra = [m for m in eval_models if m != "broadcast"]
    if extra:
        return f"run.secure_aggregation: eval.models {extra[0]} scores individual clients' models; keep [broadcast]"
    return None
