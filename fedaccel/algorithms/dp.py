"""Client-level differential privacy: DP-FedAvg's server step and its accountant.

``algorithm.dp: {clip: S, noise_multiplier: z, delta: 1e-5}`` on a recipe whose server takes the mean of the
uploads (McMahan, Ramage, Talwar and Zhang, "Learning Differentially Private Recurrent Language Models",
ICLR 2018, Algorithm 1 with the fixed denominator):

    delta_i <- delta_i * min(1, S / ||delta_i||)                  each upload clipped to norm S
    w_{t+1} = w_t - server_lr * (sum_i delta_i + N(0, (z S)^2 I)) / m

m is the round's expected number of uploads, public and data-independent: round(C N) with ``train.sampling:
fixed`` (C N clients drawn without replacement), C N with ``bernoulli`` (each client with probability C). Every
upload counts the same (uniform weighting): a data-weighted mean would need a bound on the weights. The noise
is drawn from (seed, "dp-noise", round) on the CPU, so every runtime and device adds the same vector.

The guarantee, (epsilon, delta) at the client level, holds for the sequence of models against anyone who sees
them (the server too: the noise is added where the uploads are summed, so the server is trusted to add it).
The accountant is dp-accounting's RDP accountant (Google; never hand-written here), for the sampling the run
uses: fixed-size sampling without replacement under replace-one neighbours (the sum's sensitivity is then 2S:
the event's noise multiplier is z / 2), Bernoulli sampling as a Poisson-subsampled Gaussian under
add-or-remove-one (sensitivity S). ``target_epsilon`` in place of ``noise_multiplier`` calibrates z before the
run for ``train.rounds`` rounds.

What the guarantee does not cover, and so is refused: a part that sends the server more than the update
(FedGSNR's planning statistics, SCAFFOLD's, FedDyn's and FedDC's control variates and states in
``client_end``), a part that chooses who takes part (FedUMF's ``participation``: the accountant's sampling would
not be the run's), a server rule other than the mean (FedNova's normalised average, robust rules) and GraB's
``server_adjust``. Server optimisers (``server_opt``) are post-processing of the noised mean: allowed. Client
diagnostics written to the run folder (BHerd's selected steps, for example) are outside the guarantee.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from fedaccel.algorithms.base import Algorithm, ClientUpdate, Part, RoundInfo, make_rng
from fedaccel.errors import ConfigError, shown

PART_NAME = "dp"
SETTINGS = ("clip", "noise_multiplier", "target_epsilon", "delta")
POPULATION = ("clients", "fraction", "sampling", "rounds")  # filled from the run's config, never by hand
# stages whose presence puts a part outside the guarantee, and why (see the module docstring)
OUTSIDE = {
    "plan_client": "sends planning statistics to the server",
    "client_end": "keeps client state whose extras go up beside the update",
    "participation": "chooses who takes part, so the accountant's sampling is not the run's",
    "server_adjust": "adjusts the server step from what clients report",
    "aggregate": "aggregates by a rule other than the mean",
}


@dataclass(frozen=True)
class DPSettings:
    """What ``algorithm.dp`` asks for, with the population it applies to (from the config)."""

    clip: float
    noise_multiplier: float
    delta: float
    clients: int
    fraction: float
    sampling: str
    rounds: int

    @property
    def expected_uploads(self) -> float:
        """m: the public denominator of the noised mean."""
        if self.sampling == "bernoulli":
            return self.fraction * self.clients
        return float(min(self.clients, max(1, math.floor(self.fraction * self.clients + 0.5 + 1e-9))))


def _number(spec: Mapping[str, Any], key: str, default: Any = None) -> Any:
    value = spec.get(key, default)
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                              or not math.isfinite(value)):
        raise ConfigError(f"algorithm.dp.{key} must be a finite number, got {shown(value)}")
    return value


def dp_settings(spec: Any) -> DPSettings:
    """``algorithm.dp`` (with the population keys the config adds) checked; every fault is one line."""
    if not isinstance(spec, Mapping):
        raise ConfigError(f"algorithm.dp must be a mapping such as {{clip: 1.0, noise_multiplier: 1.0}}, got {shown(spec)}")
    unknown = sorted(set(spec) - set(SETTINGS) - set(POPULATION), key=str)
    if unknown:
        raise ConfigError(f"algorithm.dp has no option {shown(unknown[0])}; known: {', '.join(SETTINGS)}")
    clip, z, target = _number(spec, "clip"), _number(spec, "noise_multiplier"), _number(spec, "target_epsilon")
    delta = _number(spec, "delta", 1e-5)
    if clip is None or not clip > 0:
        raise ConfigError(f"algorithm.dp.clip (S, the norm each upload is clipped to) must be > 0, got {shown(clip)}")
    if (z is None) == (target is None):
        raise ConfigError("algorithm.dp needs exactly one of noise_multiplier (z) and target_epsilon")
    if z is not None and not z > 0:
        raise ConfigError(f"algorithm.dp.noise_multiplier must be > 0 (z = 0 guarantees nothing; train.clip clips "
                          f"without noise), got {shown(z)}")
    if target is not None and not target > 0:
        raise ConfigError(f"algorithm.dp.target_epsilon must be > 0, got {shown(target)}")
    if not 0 < delta < 1:
        raise ConfigError(f"algorithm.dp.delta must be in (0, 1), got {shown(delta)}")
    missing = [key for key in POPULATION if key not in spec]
    if missing:
        raise ConfigError(f"algorithm.dp needs the run's population ({', '.join(missing)}): build the algorithm from "
                          "a config (fedaccel.runs.config.build_algorithm_from), which adds it")
    clients, fraction, sampling, rounds = (spec[key] for key in POPULATION)
    if sampling not in ("fixed", "bernoulli"):
        raise ConfigError(f"algorithm.dp: train.sampling must be fixed or bernoulli, got {shown(sampling)}")
    settings = DPSettings(float(clip), 0.0 if z is None else float(z), float(delta), int(clients), float(fraction),
                          sampling, int(rounds))
    if target is not None:
        settings = DPSettings(settings.clip, calibrate(settings, float(target)), *_rest(settings))
    return settings


def _rest(s: DPSettings) -> tuple[Any, ...]:
    return s.delta, s.clients, s.fraction, s.sampling, s.rounds


# --- the accountant (dp-accounting) --------------------------------------------------------------


def _library() -> Any:
    try:
        import dp_accounting
    except ImportError:
        raise ConfigError("algorithm.dp needs dp-accounting: pip install 'fedaccel[privacy]' "
                          "(make install installs it)") from None
    return dp_accounting


def _event(settings: DPSettings, noise_multiplier: float, rounds: int) -> Any:
    dp_accounting = _library()

    q = min(1.0, settings.fraction)
    if settings.sampling == "bernoulli":
        step = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(noise_multiplier))
    else:  # replace-one: the clipped sum moves by up to 2S, so the event's multiplier is z / 2
        m = int(settings.expected_uploads)
        gaussian = dp_accounting.GaussianDpEvent(noise_multiplier / 2)
        step = gaussian if m >= settings.clients else \
            dp_accounting.SampledWithoutReplacementDpEvent(settings.clients, m, gaussian)
    return dp_accounting.SelfComposedDpEvent(step, rounds)


def _accountant(settings: DPSettings) -> Any:
    _library()
    from dp_accounting import NeighboringRelation
    from dp_accounting.rdp import RdpAccountant

    relation = NeighboringRelation.ADD_OR_REMOVE_ONE if settings.sampling == "bernoulli" \
        else NeighboringRelation.REPLACE_ONE
    return RdpAccountant(neighboring_relation=relation)


def epsilon(settings: DPSettings, rounds: int, noise_multiplier: float | None = None) -> float:
    """epsilon(delta) after ``rounds`` rounds (0 after none): dp-accounting's RDP of one round, composed
    ``rounds`` times (RDP adds up: the accountant's own composition) and converted by its ``compute_epsilon``."""
    from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

    if rounds <= 0:
        return 0.0
    orders, rdp = _round_rdp(settings, settings.noise_multiplier if noise_multiplier is None else noise_multiplier)
    with _quiet():
        return float(compute_epsilon(orders, [rounds * r for r in rdp], settings.delta)[0])


@functools.lru_cache(maxsize=32)
def _round_rdp(settings: DPSettings, noise_multiplier: float) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(orders, RDP at each order) of one round, from the accountant (computed once per setting: the
    sampled-without-replacement bound takes a fraction of a second)."""
    accountant = _accountant(settings)
    with _quiet():
        accountant.compose(_event(settings, noise_multiplier, 1))
    return tuple(accountant._orders), tuple(accountant._rdp)  # pinned dp-accounting 0.6: no public accessor


@contextmanager
def _quiet() -> Iterator[None]:
    """dp-accounting logs (through absl) each Renyi order it leaves out as not converging: not the user's business."""
    log = logging.getLogger("absl")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


@functools.lru_cache(maxsize=32)
def calibrate(settings: DPSettings, target: float) -> float:
    """The smallest noise multiplier z whose epsilon(delta) after ``settings.rounds`` rounds is <= ``target``."""
    dp_accounting = _library()

    try:
        with _quiet():
            z = dp_accounting.calibrate_dp_mechanism(
                lambda: _accountant(settings), lambda z: _event(settings, z, settings.rounds), target, settings.delta,
                bracket_interval=dp_accounting.LowerEndpointAndGuess(1e-2, 1.0), tol=1e-4)
    except (ValueError, RuntimeError, ArithmeticError) as exc:  # the library's own: a target no noise multiplier reaches
        raise ConfigError(f"algorithm.dp.target_epsilon {target:g} cannot be met at delta {settings.delta:g} "
                          f"over {settings.rounds} rounds: {exc}") from None
    return float(z)


# --- the server step ------------------------------------------------------------------------------


def clipped(delta: Tensor, clip: float) -> Tensor:
    """``delta`` scaled down to norm ``clip`` where it is longer (float64 norm; a zero vector stays)."""
    norm = float(torch.linalg.vector_norm(delta.to(torch.float64)))
    return delta * (clip / norm) if norm > clip else delta


def standard_normal(info: RoundInfo, shape: torch.Size) -> Tensor:
    """N(0, I) of ``shape`` from (seed, "dp-noise", round), drawn on the CPU in float64: the round's one draw."""
    seed = int(make_rng(info.seed, "dp-noise", info.round).integers(2**63 - 1))
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def noise(info: RoundInfo, like: Tensor, std: float) -> Tensor:
    """N(0, std^2 I) of ``like``'s shape: the round's standard normal draw scaled by ``std``."""
    return standard_normal(info, like.shape).mul_(std).to(device=like.device, dtype=like.dtype)


def dp_mean(settings: DPSettings, *, server_lr: float = 1.0) -> Part:
    """The DP-FedAvg server step (module docstring) as an ``aggregate`` part."""

    def aggregate(info: RoundInfo, w: Tensor, updates: Sequence[ClientUpdate]) -> Tensor:
        total = torch.zeros_like(w)
        for update in updates:
            total.add_(clipped(update.delta, settings.clip))
        if settings.noise_multiplier > 0:
            total.add_(noise(info, w, settings.noise_multiplier * settings.clip))
        return torch.sub(w, total, alpha=server_lr / settings.expected_uploads)

    return Part(name=PART_NAME, aggregate=aggregate)


def with_dp(algorithm: Algorithm, settings: DPSettings, *, server_lr: float = 1.0) -> Algorithm:
    """``algorithm`` with its mean replaced by the DP mean; a part outside the guarantee is one line."""
    for part in algorithm.parts:
        if part.name == "mean":
            continue
        for stage, why in OUTSIDE.items():
            if getattr(part, stage, None) is not None:
                raise ConfigError(f"algorithm.dp cannot cover {algorithm.name}: its part {part.name!r} {why}; "
                                  "client-level DP composes with recipes whose server takes the mean of the uploads "
                                  "(fedavg, fedprox, bherd, grab-reorder, server optimisers)")
    if not any(part.name == "mean" for part in algorithm.parts):
        raise ConfigError(f"algorithm.dp cannot cover {algorithm.name}: its server takes no mean of the uploads")
    parts = tuple(dp_mean(settings, server_lr=server_lr) if p.name == "mean" else p for p in algorithm.parts)
    return Algorithm(algorithm.name, parts)


def epsilon_column(settings: DPSettings | None, rounds: int) -> dict[str, float]:
    """The row's ``epsilon`` after ``rounds`` rounds (nothing without DP)."""
    return {} if settings is None else {"epsilon": epsilon(settings, rounds)}
