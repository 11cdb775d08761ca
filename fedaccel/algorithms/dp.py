"""Client-level differential privacy: DP-FedAvg's server step and its accountant.

``algorithm.dp: {clip: S, noise_multiplier: z, delta: 1e-5}`` on a recipe whose server takes the mean of the
uploads (McMahan, Ramage, Talwar and Zhang, "Learning Differentially Private Recurrent Language Models",
ICLR 2018, Algorithm 1 with the fixed denominator):

    delta_i <- delta_i * min(1, S / ||delta_i||)                  each upload clipped to norm S (0 if not finite)
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

``clip: adaptive`` (Andrew et al., NeurIPS 2021) makes the clip norm the server's state, following a target
quantile of the update norms through a noised count (`adaptive_dp_mean`); ``noise: client`` has each client
clip and add its share N(0, (z S)^2 / m) before its update leaves (the ``upload`` stage), the server only summing.
docs/privacy.md states both guarantees, and where Flower's adaptive strategies differ from the paper.

``plan_clip: {g: C_g, s: C_s, n: n_max}`` makes FedGSNR's plan private (:mod:`fedaccel.algorithms.dp_plan`, put
in place of FedGSNR's planning part): three more noised releases a round at r z (``plan_noise: r``, 1 unless
given), so the accountant's event is one Gaussian of z / sqrt(1 + 3 / r^2), z / 2 at r = 1
(:meth:`DPSettings.round_noise_multiplier`), and ``target_epsilon`` calibrates z for that. A larger r puts more of
the budget on the model and less on the plan. It takes server noise and a fixed clip.

What the guarantee does not cover, and so is refused: a part that sends the server more than the update
(FedGSNR's planning statistics without ``plan_clip``, SCAFFOLD's, FedDyn's and FedDC's control variates and states in
``client_end``), a part that chooses who uploads other than as the accountant samples, a server rule other than
the mean (FedNova's normalised average, robust rules), GraB's ``server_adjust`` and a ``server_end`` that reads
the individual uploads (FedExP's step size, from their norms). Server optimisers (``server_opt``) read only the
noised mean's model and are post-processing of it: allowed (they declare ``Part.models_only``). Client diagnostics
written to the run folder (BHerd's selected steps, for example) are outside the guarantee.

A part with those stages is admitted when it declares what keeps it inside (``Part.upload_fraction``,
``Part.no_extras``), checked against the settings: FedUMF (and fedumf-fedprox, fedumf-bherd). Its ``participation`` uploads
exactly ``sample_clients(info, C)``, FedAvg's sampling of the run, so it is admitted when that sample is the
accountant's: round(C N) = m under ``train.sampling: fixed``, C = ``train.client_fraction`` under ``bernoulli``
(each client with probability C; no ``train.participation`` schedule: the config refuses one under DP). Its
``client_end`` returns no extras: the stored update stays on the client and is fused into the start of the
client's next authorised round, whose upload, the whole fused movement, is clipped to S. A round's
release depends on a client's data only through its clipped upload when it is sampled, and the sampling is
independent of the data; that the upload also depends on the client's data from earlier rounds and on the
earlier public models is adaptive composition, which the accountant's per-round composition covers. So FedUMF's
mechanism is FedAvg's: the fixed-size subsampled Gaussian at q = m / N, or the Poisson-subsampled one at q = C.
The DP mean checks this at run time too: an upload that carries extras is refused in one line.
"""

from __future__ import annotations

import functools
import json
import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from fedaccel.algorithms.base import (
    Algorithm,
    ClientContext,
    ClientUpdate,
    Part,
    RoundInfo,
    finite_norm,
    make_rng,
    seeded_normal,
)
from fedaccel.errors import ConfigError, shown

PART_NAME = "dp"
SETTINGS = ("clip", "noise_multiplier", "target_epsilon", "delta", "noise", "plan_clip", "plan_noise")
PLAN_CLIP = ("g", "s", "n")  # plan_clip's keys: C_g, C_s and n_max of FedGSNR's private plan (dp_plan.py)
ADAPTIVE = ("initial_clip", "target_quantile", "clip_lr", "count_noise")  # with clip: adaptive (Andrew et al.)
POPULATION = ("clients", "fraction", "sampling", "rounds")  # filled from the run's config, never by hand
# stages whose presence puts a part outside the guarantee, and why (see the module docstring)
OUTSIDE = {
    "plan_client": "sends planning statistics to the server",
    "client_end": "keeps client state whose extras go up beside the update",
    "participation": "chooses who takes part, so the accountant's sampling is not the run's",
    "server_adjust": "adjusts the server step from what clients report",
    "aggregate": "aggregates by a rule other than the mean",
    "server_end": "reads the individual uploads in its server_end (a part whose server_end reads only w and w_next "
                  "declares Part.models_only)",
}


@dataclass(frozen=True)
class AdaptiveClip:
    """``clip: adaptive``: the clip norm follows the ``target_quantile`` (gamma) of the update norms (Andrew et al.)."""

    initial_clip: float = 0.1  # C_0
    target_quantile: float = 0.5  # gamma: the fraction of uploads meant to fall within the clip norm
    clip_lr: float = 0.2  # eta_C of the geometric update
    count_noise: float | None = None  # sigma_b, the noise on the count within the norm (None: m / 20)


@dataclass(frozen=True)
class PlanClip:
    """``plan_clip: {g: C_g, s: C_s, n: n_max}``: the clips of a private FedGSNR plan's releases (dp_plan.py)."""

    g: float  # C_g, the norm each client's mean gradient g_k is clipped to
    s: float  # C_s, the norm each client's second moment s_k = v_k + g_k^2 is clipped to
    n: float  # n_max, each client's step ratio n_k is capped at


@dataclass(frozen=True)
class DPSettings:
    """What ``algorithm.dp`` asks for, with the population it applies to (from the config). With ``adaptive``,
    ``clip`` is the initial clip norm; ``noise`` says who adds the noise (``server``, or each ``client`` its share)."""

    clip: float
    noise_multiplier: float
    delta: float
    clients: int
    fraction: float
    sampling: str
    rounds: int
    noise: str = "server"
    adaptive: AdaptiveClip | None = None
    plan_clip: PlanClip | None = None
    plan_noise: float = 1.0  # r: the private plan's releases are noised at r z (the model's sum at z)

    @property
    def expected_uploads(self) -> float:
        """m: the public denominator of the noised mean."""
        if self.sampling == "bernoulli":
            return self.fraction * self.clients
        return float(min(self.clients, max(1, math.floor(self.fraction * self.clients + 0.5 + 1e-9))))

    @property
    def count_noise(self) -> float:
        """sigma_b: the count's noise (adaptive clipping), m / 20 unless given (Andrew et al.'s choice)."""
        given = None if self.adaptive is None else self.adaptive.count_noise
        return self.expected_uploads / 20 if given is None else given

    @property
    def sum_noise_multiplier(self) -> float:
        """The noise multiplier on the clipped sum: z itself with a fixed clip; with adaptive clipping z_Delta =
        (z^-2 - (2 sigma_b)^-2)^(-1/2), so that the sum and the count together are one Gaussian of multiplier z
        (Andrew et al., Section 3.1: the count's bits are centred, sensitivity 1/2)."""
        z = self.noise_multiplier
        if self.adaptive is None or z == 0:
            return z
        return (z ** -2 - (2 * self.count_noise) ** -2) ** -0.5

    def round_noise_multiplier(self, z: float) -> float:
        """The noise multiplier of a round's one Gaussian at the model's z: z itself, or with a private plan
        (three more releases of multiplier r z on the same clients, each of sensitivity 1 once normalised by its
        clip) z_eff with 1 / z_eff^2 = 1 / z^2 + 3 / (r z)^2: z / 2 at r = 1."""
        if self.plan_clip is None:
            return z
        return z / math.sqrt(1 + len(PLAN_CLIP) / self.plan_noise ** 2)


def _number(spec: Mapping[str, Any], key: str, default: Any = None) -> Any:
    """``spec[key]`` checked as a finite number; absent or null (YAML's ``~``) is ``default``."""
    value = spec.get(key)
    value = default if value is None else value
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                              or not math.isfinite(value)):
        raise ConfigError(f"algorithm.dp.{key} must be a finite number, got {shown(value)}")
    return value


def dp_settings(spec: Any) -> DPSettings:
    """``algorithm.dp`` (with the population keys the config adds) checked; every fault is one line."""
    if not isinstance(spec, Mapping):
        raise ConfigError(f"algorithm.dp must be a mapping such as {{clip: 1.0, noise_multiplier: 1.0}}, got {shown(spec)}")
    unknown = sorted(set(spec) - set(SETTINGS) - set(ADAPTIVE) - set(POPULATION), key=str)
    if unknown:
        raise ConfigError(f"algorithm.dp has no option {shown(unknown[0])}; known: {', '.join(SETTINGS + ADAPTIVE)}")
    adaptive = spec.get("clip") == "adaptive"
    if not adaptive and any(key in spec for key in ADAPTIVE):
        raise ConfigError(f"algorithm.dp.{next(k for k in ADAPTIVE if k in spec)} belongs to clip: adaptive")
    clip = _adaptive_clip(spec).initial_clip if adaptive else _number(spec, "clip")
    z, target = _number(spec, "noise_multiplier"), _number(spec, "target_epsilon")
    delta = _number(spec, "delta", 1e-5)
    noise = spec.get("noise", "server")
    if noise not in ("server", "client"):
        raise ConfigError(f"algorithm.dp.noise must be server or client, got {shown(noise)}")
    if clip is None or not clip > 0:
        raise ConfigError(f"algorithm.dp.clip (S, the norm each upload is clipped to) must be > 0 or adaptive, "
                          f"got {shown(clip)}")
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
    if isinstance(clients, int) and clients > 0 and not delta < 1 / clients:  # a new user's delta: 0.5 was taken
        raise ConfigError(f"algorithm.dp.delta must be below 1/N = 1/{clients} (data.clients), got {shown(delta)}: "
                          "with probability delta the guarantee may fail outright, e.g. one client's data released "
                          "whole; 1e-5 or below 1/N^2 is usual")
    if sampling not in ("fixed", "bernoulli"):
        raise ConfigError(f"algorithm.dp: train.sampling must be fixed or bernoulli, got {shown(sampling)}")
    plan_clip = _plan_clip(spec["plan_clip"]) if "plan_clip" in spec else None
    if plan_clip is not None and (noise == "client" or adaptive):
        raise ConfigError("algorithm.dp.plan_clip (a private FedGSNR plan) takes noise: server and a fixed clip: "
                          "the server plans from the clients' raw statistics, and the plan's noise is z times its clips")
    plan_noise = _number(spec, "plan_noise", 1.0)
    if "plan_noise" in spec and plan_clip is None:
        raise ConfigError("algorithm.dp.plan_noise is the noise of a private FedGSNR plan's releases: give it with "
                          "plan_clip, or leave it out")
    if not (math.isfinite(plan_noise) and plan_noise > 0):
        raise ConfigError(f"algorithm.dp.plan_noise (r: the plan's releases are noised at r z) must be a finite number "
                          f"> 0, got {shown(spec.get('plan_noise'))}")
    settings = DPSettings(float(clip), 0.0 if z is None else float(z), float(delta), int(clients), float(fraction),
                          sampling, int(rounds), noise, _adaptive_clip(spec) if adaptive else None, plan_clip,
                          float(plan_noise))
    if noise == "client" and adaptive:
        raise ConfigError("algorithm.dp: noise: client takes a fixed clip (with clip: adaptive each client's "
                          "clipped-or-not bit would reach the server un-noised)")
    if noise == "client" and sampling != "fixed":
        raise ConfigError("algorithm.dp: noise: client needs train.sampling: fixed (the clients' shares add up to "
                          "the stated noise only when m clients upload)")
    if target is not None:
        settings = replace(settings, noise_multiplier=calibrate(settings, float(target)))
    if adaptive and not settings.noise_multiplier < 2 * settings.count_noise:
        raise ConfigError(f"algorithm.dp: clip: adaptive needs noise_multiplier z < 2 count_noise (sigma_b = "
                          f"{settings.count_noise:g}): the sum's share of the noise is (z^-2 - (2 sigma_b)^-2)^-1/2")
    return settings


def _plan_clip(spec: Any) -> PlanClip:
    """``plan_clip: {g: C_g, s: C_s, n: n_max}``, each a finite number > 0."""
    if not isinstance(spec, Mapping) or set(spec) != set(PLAN_CLIP):
        raise ConfigError(f"algorithm.dp.plan_clip must be {{g: C_g, s: C_s, n: n_max}} (each > 0), got {shown(spec)}")
    bad = [key for key in PLAN_CLIP if isinstance(spec[key], bool) or not isinstance(spec[key], (int, float))
           or not math.isfinite(spec[key]) or not spec[key] > 0]
    if bad:
        raise ConfigError(f"algorithm.dp.plan_clip.{bad[0]} must be a finite number > 0, got {shown(spec[bad[0]])}")
    return PlanClip(*(float(spec[key]) for key in PLAN_CLIP))


def _adaptive_clip(spec: Mapping[str, Any]) -> AdaptiveClip:
    """The adaptive clip's keys, checked (defaults: Andrew et al.'s, as Flower's)."""
    defaults = AdaptiveClip()
    values = {key: _number(spec, key, getattr(defaults, key)) for key in ADAPTIVE}
    if not values["initial_clip"] > 0 or not values["clip_lr"] > 0:
        raise ConfigError("algorithm.dp: initial_clip and clip_lr must be > 0, got "
                          f"{shown(values['initial_clip'])} and {shown(values['clip_lr'])}")
    if not 0 <= values["target_quantile"] <= 1:
        raise ConfigError(f"algorithm.dp.target_quantile must be in [0, 1], got {shown(values['target_quantile'])}")
    if values["count_noise"] is not None and not values["count_noise"] > 0:
        raise ConfigError(f"algorithm.dp.count_noise must be > 0, got {shown(values['count_noise'])}")
    return AdaptiveClip(**{key: None if v is None else float(v) for key, v in values.items()})


# --- the accountant (dp-accounting) --------------------------------------------------------------


def _library() -> Any:
    try:
        import dp_accounting
    except ImportError:
        raise ConfigError("algorithm.dp needs dp-accounting: pip install 'fedaccel[privacy]' "
                          "(make install installs it)") from None
    return dp_accounting


def _event(settings: DPSettings, noise_multiplier: float, rounds: int) -> Any:
    """The run's event at the releases' noise multiplier: one sampled Gaussian a round (of the round's one
    multiplier, :meth:`DPSettings.round_noise_multiplier`), self-composed ``rounds`` times."""
    dp_accounting = _library()

    noise_multiplier = settings.round_noise_multiplier(noise_multiplier)
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


#: Noise multipliers :func:`calibrate` found before, by what they depend on (:func:`calibration_key`): loading an
#: experiment calibrates every cell, ~14 evaluations of the accountant each (a third of a second each under
#: fixed-size sampling), where checking a known z takes two. An entry is used only if it passes
#: (:func:`_known`), so a stale or altered one costs only the time it meant to save; ``python
#: scripts/dp_calibrations.py`` writes it from the repository's experiments.
CALIBRATIONS = Path(__file__).with_name("dp_calibrations.json")
LEAST_SEARCHED = 1e-2  # the least noise multiplier the calibration searches from
CALIBRATION_TOL = 1e-4  # z's tolerance: the z returned is within this of the smallest that meets the target


@functools.lru_cache(maxsize=32)
def calibrate(settings: DPSettings, target: float) -> float:
    """The smallest noise multiplier z whose epsilon(delta) after ``settings.rounds`` rounds is <= ``target``
    (within :data:`CALIBRATION_TOL`): a known one that passes its check, else dp-accounting's search."""
    known = _known(settings, target)
    return known if known is not None else search_noise_multiplier(settings, target)


def search_noise_multiplier(settings: DPSettings, target: float) -> float:
    """:func:`calibrate` by dp-accounting's own search (a bracket, then Brent's method to the tolerance)."""
    dp_accounting = _library()

    met_by_all = ConfigError(
        f"algorithm.dp.target_epsilon {target:g} is met at delta {settings.delta:g} over {settings.rounds} rounds by "
        f"noise multipliers down to {LEAST_SEARCHED:g}, the least the calibration searches: an epsilon this large "
        "guarantees next to nothing; give a smaller target_epsilon, or noise_multiplier itself")
    try:
        if _run_epsilon(settings, LEAST_SEARCHED) <= target:  # no bracket: the search would fail inside the library
            raise met_by_all
        with _quiet():
            z = dp_accounting.calibrate_dp_mechanism(
                lambda: _accountant(settings), lambda z: _event(settings, z, settings.rounds), target, settings.delta,
                bracket_interval=dp_accounting.LowerEndpointAndGuess(LEAST_SEARCHED, 1.0), tol=CALIBRATION_TOL)
    except dp_accounting.mechanism_calibration.NoBracketIntervalFoundError:
        raise met_by_all from None
    except (ValueError, RuntimeError, ArithmeticError) as exc:  # the library's own: a target no noise multiplier reaches
        raise ConfigError(f"algorithm.dp.target_epsilon {target:g} cannot be met at delta {settings.delta:g} "
                          f"over {settings.rounds} rounds: {exc}") from None
    return float(z)


def calibration_key(settings: DPSettings, target: float) -> str:
    """What the calibrated z depends on, as one line of JSON: the sampling and its population, the rounds, delta,
    the round's multiplier at z = 1 (a private plan's share) and the target."""
    return json.dumps([settings.sampling, settings.clients, settings.fraction, settings.rounds, settings.delta,
                       settings.round_noise_multiplier(1.0), float(target)])


def _known(settings: DPSettings, target: float) -> float | None:
    """The table's z for these settings if it still is what the search would find: epsilon(z) <= target <
    epsilon(z - tolerance), the accountant's epsilon falling as z grows (else None)."""
    z = _table().get(calibration_key(settings, target))
    if not isinstance(z, float) or not math.isfinite(z) or not z > CALIBRATION_TOL:
        return None
    return z if _run_epsilon(settings, z) <= target < _run_epsilon(settings, z - CALIBRATION_TOL) else None


def _run_epsilon(settings: DPSettings, z: float) -> float:
    """epsilon(delta) of the whole run at noise multiplier ``z``, as dp-accounting's search computes it."""
    with _quiet():
        return float(_accountant(settings).compose(_event(settings, z, settings.rounds)).get_epsilon(settings.delta))


@functools.cache
def _table() -> dict[str, Any]:
    """:data:`CALIBRATIONS` (empty where it is missing or not a JSON object)."""
    try:
        table = json.loads(CALIBRATIONS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return table if isinstance(table, dict) else {}


# --- the server step ------------------------------------------------------------------------------


def clipped(delta: Tensor, clip: float) -> Tensor:
    """``delta`` scaled down to norm ``clip`` where it is longer (float64 norm; a zero vector stays)."""
    delta, norm = finite_or_zero(delta)
    return delta * (clip / norm) if norm > clip else delta


def finite_or_zero(delta: Tensor) -> tuple[Tensor, float]:
    """(``delta``, its float64 norm), or zero and 0 for a non-finite ``delta`` (local training that overflowed):
    a rule that reads no data, so one client still moves the sum by at most the clip norm (a NaN norm is never
    above it, and would pass unclipped). The round's diag lists such clients (``zeroed``, ``Part.zeroes_non_finite``)."""
    norm = finite_norm(delta)
    return (delta, norm) if norm is not None else (torch.zeros_like(delta), 0.0)


def standard_normal(info: RoundInfo, shape: torch.Size) -> Tensor:
    """N(0, I) of ``shape`` from (seed, "dp-noise", round): the round's one draw."""
    return seeded_normal(shape, info.seed, "dp-noise", info.round)


def noise(info: RoundInfo, like: Tensor, std: float) -> Tensor:
    """N(0, std^2 I) of ``like``'s shape: the round's standard normal draw scaled by ``std``."""
    return standard_normal(info, like.shape).mul_(std).to(device=like.device, dtype=like.dtype)


def dp_mean(settings: DPSettings, *, server_lr: float = 1.0) -> Part:
    """The DP-FedAvg server step (module docstring) as an ``aggregate`` part; with ``noise: client`` each client
    clips its upload and adds its share of the noise (``upload``), and the server only sums."""
    if settings.adaptive is not None:
        return adaptive_dp_mean(settings, server_lr=server_lr)
    on_client = settings.noise == "client"

    def aggregate(info: RoundInfo, w: Tensor, updates: Sequence[ClientUpdate]) -> Tensor:
        total = torch.zeros_like(w)
        for update in updates:
            total.add_(update_only(update) if on_client else clipped(update_only(update), settings.clip))
        if settings.noise_multiplier > 0 and not on_client:
            total.add_(noise(info, w, settings.noise_multiplier * settings.clip))
        return torch.sub(w, total, alpha=server_lr / settings.expected_uploads)

    def upload(ctx: ClientContext, delta: Tensor, _ss: Any) -> Tensor:
        """The client's clipped upload plus its share N(0, (z S)^2 / m), from (seed, "dp-share", round, client)."""
        share = settings.noise_multiplier * settings.clip / math.sqrt(settings.expected_uploads)
        return clipped(delta, settings.clip) + client_noise(ctx.info, ctx.client, delta, share)

    return Part(name=PART_NAME, aggregate=aggregate, upload=upload if on_client else None,
                zeroes_non_finite=not on_client)  # with client noise, each client zeroes its own


def update_only(update: ClientUpdate) -> Tensor:
    """The upload's update; an upload that carries extras beside it is outside the guarantee: one line."""
    if update.extras:
        raise ConfigError(f"algorithm.dp: client {update.client}'s upload carries {sorted(update.extras)[0]!r} "
                          "beside its update, which the guarantee does not cover")
    return update.delta


def client_noise(info: RoundInfo, client: int, like: Tensor, std: float) -> Tensor:
    """N(0, std^2 I) of ``like``'s shape from (seed, "dp-share", round, client), drawn on the CPU in float64."""
    draw = seeded_normal(like.shape, info.seed, "dp-share", info.round, client)
    return draw.mul_(std).to(device=like.device, dtype=like.dtype)


def count_normal(info: RoundInfo) -> float:
    """The round's standard normal for the noised count (adaptive clipping), from (seed, "dp-count", round)."""
    return float(make_rng(info.seed, "dp-count", info.round).standard_normal())


def adaptive_dp_mean(settings: DPSettings, *, server_lr: float = 1.0) -> Part:
    """DP-FedAvg with adaptive clipping (Andrew, Thakkar, McMahan and Ramaswamy, NeurIPS 2021, Algorithm 1): the
    server state is this round's clip norm C. Each upload is clipped to C and b_i = 1 where its norm is <= C; the
    step is the noised mean with noise z_Delta C; then C <- C exp(-eta_C (b~ - gamma)), b~ = (sum_i b_i +
    N(0, sigma_b^2)) / m. The step needs C, which is state, so it is taken in ``server_end`` (``aggregate`` leaves
    w as it is), every round, with no upload too: each round is a release the accountant counts."""
    adaptive = settings.adaptive
    assert adaptive is not None
    m = settings.expected_uploads

    def init(_w0: Tensor) -> float:
        return settings.clip

    def aggregate(_info: RoundInfo, w: Tensor, _updates: Sequence[ClientUpdate]) -> Tensor:
        return w

    def server_end(info: RoundInfo, w: Tensor, _w_next: Tensor, updates: Sequence[ClientUpdate],
                   clip: float) -> tuple[Tensor, float]:
        total, within = torch.zeros_like(w), 0
        for update in updates:
            delta, norm = finite_or_zero(update_only(update))
            within += norm <= clip
            total.add_(delta * (clip / norm) if norm > clip else delta)
        if settings.noise_multiplier > 0:
            total.add_(noise(info, w, settings.sum_noise_multiplier * clip))
        counted = (within + settings.count_noise * count_normal(info)) / m if settings.noise_multiplier > 0 \
            else within / m
        next_clip = clip * math.exp(-adaptive.clip_lr * (counted - adaptive.target_quantile))
        return torch.sub(w, total, alpha=server_lr / m), next_clip

    return Part(name=PART_NAME, init_server=init, aggregate=aggregate, server_end=server_end,
                releases_every_round=True, zeroes_non_finite=True)


def outside(part: Part, settings: DPSettings, *, plan_hint: bool = True) -> str | None:
    """Why ``part`` is outside the guarantee of ``settings`` (None: inside). A ``client_end`` that declares
    ``no_extras`` and a ``participation`` that declares its ``upload_fraction`` are inside when that fraction's
    sample is the accountant's (module docstring). ``plan_hint``: FedGSNR's refusal names plan_clip (not where
    another part has every client train: :func:`_private_plan` refuses that too)."""
    for stage, why in OUTSIDE.items():
        if getattr(part, stage, None) is None or (stage == "client_end" and part.no_extras) or (
                stage == "server_end" and part.models_only):
            continue
        if stage != "participation" or part.upload_fraction is None:
            hint = " (give algorithm.dp.plan_clip: {g: C_g, s: C_s, n: n_max} to make its plan private)" \
                if part.name == "fedgsnr" and stage == "plan_client" and plan_hint else ""
            return why + hint
        if settings.sampling == "bernoulli":
            if part.upload_fraction == settings.fraction:
                continue
            return (f"has each client upload with probability C = {part.upload_fraction:g} where the accountant's "
                    f"Bernoulli rate is {settings.fraction:g} (train.client_fraction): give both the same C")
        own = replace(settings, fraction=part.upload_fraction).expected_uploads
        if own != settings.expected_uploads:
            return (f"uploads {own:g} clients a round (its fraction C = {part.upload_fraction:g}) where the "
                    f"accountant samples {settings.expected_uploads:g} of {settings.clients} (train.client_fraction "
                    f"= {settings.fraction:g}): give both the same C")
    return None


def with_dp(algorithm: Algorithm, settings: DPSettings, *, server_lr: float = 1.0,
            planning: Mapping[str, Any] | None = None) -> Algorithm:
    """``algorithm`` with its mean replaced by the DP mean, and FedGSNR's plan (``planning``: its recipe's
    ``samples``, ``e_const`` and ``plan``) by the private plan where ``settings.plan_clip`` is given; a part
    outside the guarantee is one line."""
    private_plan = _private_plan(algorithm, settings, planning)
    checked = [part for part in algorithm.parts if part.name != "mean" and part is not private_plan[0]]
    unplannable = any(part.name != "fedgsnr" and outside(part, settings) is not None for part in checked)
    plan_hint = trainer_chooser(algorithm) is None and not unplannable  # plan_clip alone would not cover it
    for part in sorted(checked, key=lambda p: p.name == "fedgsnr"):  # what plan_clip cannot mend first
        why = outside(part, settings, plan_hint=plan_hint)
        if why is not None:
            raise ConfigError(f"algorithm.dp cannot cover {algorithm.name}: its part {part.name!r} {why}; "
                              "client-level DP composes with recipes whose server takes the mean of the uploads "
                              "(fedavg, fedprox, bherd, grab-reorder, fedumf and their combinations, fedgsnr with "
                              "plan_clip, server optimisers)")
    if not any(part.name == "mean" for part in algorithm.parts):
        raise ConfigError(f"algorithm.dp cannot cover {algorithm.name}: its server takes no mean of the uploads")
    names = [part.name for part in algorithm.parts]
    before = [part.name for part in algorithm.parts[:names.index("mean")] if part.server_end is not None]
    if settings.adaptive is not None and before:  # the adaptive step is a server_end: one before it would not see it
        raise ConfigError(f"algorithm.dp: clip: adaptive cannot follow the server step of {before[0]!r}")
    parts = tuple(dp_mean(settings, server_lr=server_lr) if p.name == "mean" else
                  private_plan[1] if p is private_plan[0] else p for p in algorithm.parts)
    return Algorithm(algorithm.name, parts)


def trainer_chooser(algorithm: Algorithm) -> Part | None:
    """The part that chooses who trains (FedUMF: every client), if any: a private plan's releases would be of them."""
    return next((part for part in algorithm.parts if part.participation is not None), None)


def _private_plan(algorithm: Algorithm, settings: DPSettings, planning: Mapping[str, Any] | None
                  ) -> tuple[Part | None, Part | None]:
    """(FedGSNR's planning part, the private plan that replaces it) with ``plan_clip``; (None, None) without."""
    planners = [part for part in algorithm.parts if part.plan_server is not None]
    if settings.plan_clip is None:
        return None, None
    if not planners or planners[0].name != "fedgsnr":
        raise ConfigError(f"algorithm.dp.plan_clip makes FedGSNR's plan private; {algorithm.name} has no FedGSNR "
                          "plan (leave plan_clip out)")
    if planning is None or planning.get("plan", "gsnr") != "gsnr":
        raise ConfigError(f"algorithm.dp.plan_clip covers FedGSNR's own plan (plan: gsnr), not plan: "
                          f"{shown(None if planning is None else planning.get('plan'))}")
    if chooser := trainer_chooser(algorithm):
        raise ConfigError(f"algorithm.dp.plan_clip cannot cover {algorithm.name}: its part {shown(chooser.name)} chooses "
                          "who trains (FedUMF: every client), and the private plan's releases are of the training "
                          "clients, so they would not be the accountant's sample of the uploaders")
    from fedaccel.algorithms.dp_plan import private_planning

    clip = settings.plan_clip
    return planners[0], private_planning(
        planners[0], clip_g=clip.g, clip_s=clip.s, n_max=clip.n,
        noise_multiplier=settings.noise_multiplier * settings.plan_noise,
        expected_uploads=settings.expected_uploads, samples=int(planning["samples"]),
        e_const=int(planning["e_const"]))


def epsilon_column(settings: DPSettings | None, rounds: int) -> dict[str, float]:
    """The row's ``epsilon`` after ``rounds`` rounds (nothing without DP)."""
    return {} if settings is None else {"epsilon": epsilon(settings, rounds)}


def clip_column(settings: DPSettings | None, part_names: Sequence[str], server: Sequence[Any]) -> dict[str, float]:
    """With ``clip: adaptive``, the row's ``dp_clip``: the clip norm C the next round clips to (the dp part's
    server state; row 0's is ``initial_clip``). Nothing otherwise: a fixed clip is in the config."""
    if settings is None or settings.adaptive is None or PART_NAME not in part_names:
        return {}
    return {"dp_clip": float(server[list(part_names).index(PART_NAME)])}
