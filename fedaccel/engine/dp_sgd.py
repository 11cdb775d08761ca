"""Sample-level differential privacy on clients: DP-SGD through Opacus.

``train.dp_sgd: {clip: C, noise_multiplier: sigma, delta: 1e-5}`` makes every local step of every client a
DP-SGD step (Abadi et al., CCS 2016) as Opacus computes it: per-sample gradients from Opacus's
``GradSampleModule``, each clipped to norm C, summed, N(0, (sigma C)^2 I) added and the sum divided by the batch
size, by Opacus's ``DPOptimizer.pre_step`` (its noise from a generator seeded by (seed, "dp-sgd", round, client)).
fedaccel's own step then applies that gradient as it applies any (momentum, weight decay and local terms after it).

Each client's epsilon(delta) is Opacus's RDP accountant for the steps it has taken, at sampling rate
q_i = B / |D_i|. That accountant is for Poisson-sampled batches, and so are the batches by default
(``batches: poisson``, as Opacus's ``DPDataLoader``): every step takes each of the client's samples with
probability q_i, independently (from (seed, "dp-sgd-batches", round, client)), so a batch holds B samples on
average and may be empty (its gradient is then the noise alone, over B). ``batches: shuffled`` trains on the
run's usual fixed-size slices of ``train.order`` instead, for which the figure is the customary approximation,
not a proof (docs/privacy.md). The guarantee is per client, for its own samples, against anyone who sees its
uploads (the server too).

In process only: the stacked runtime batches clients' steps in a form Opacus does not hook into, and says so.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from fedaccel.algorithms.base import Part, make_rng
from fedaccel.errors import ConfigError, shown

KEYS = ("clip", "noise_multiplier", "delta")
BATCHES = ("poisson", "shuffled")  # train.dp_sgd.batches: what the accountant assumes, or the run's own slices
PART_NAME = "dp_sgd"  # the part that counts each client's DP-SGD steps (its client state)


@dataclass(frozen=True)
class SampleDP:
    """``train.dp_sgd``: the per-sample clip norm C, the noise multiplier sigma and delta."""

    clip: float
    noise_multiplier: float
    delta: float = 1e-5
    batches: str = "poisson"  # poisson (the accountant's sampling) or shuffled (train.order's slices)


def sample_dp(spec: Any) -> SampleDP | None:
    """``train.dp_sgd`` checked (None: off); every fault is one line."""
    if spec is None:
        return None
    if not isinstance(spec, Mapping):
        raise ConfigError(f"train.dp_sgd must be a mapping such as {{clip: 1.0, noise_multiplier: 1.0}}, got {shown(spec)}")
    unknown = sorted(set(spec) - {*KEYS, "batches"}, key=str)
    if unknown:
        raise ConfigError(f"train.dp_sgd has no option {shown(unknown[0])}; known: {', '.join(KEYS)}, batches")
    batches = spec.get("batches", "poisson")
    if not isinstance(batches, str) or batches not in BATCHES:
        raise ConfigError(f"train.dp_sgd.batches must be {' or '.join(BATCHES)}, got {shown(batches)}")
    values = {key: spec.get(key, 1e-5 if key == "delta" else None) for key in KEYS}
    missing = [key for key, value in values.items() if value is None and key not in spec]
    if missing:
        raise ConfigError(f"train.dp_sgd needs {' and '.join(missing)} (e.g. {{clip: 1.0, noise_multiplier: 1.0}}): "
                          "the per-sample clip norm and the noise's standard deviation over it")
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
            raise ConfigError(f"train.dp_sgd.{key} must be a finite number, got {shown(value)}")
    if not values["clip"] > 0 or not values["noise_multiplier"] > 0:
        raise ConfigError("train.dp_sgd: clip and noise_multiplier must be > 0 (train.clip clips without noise)")
    if not 0 < values["delta"] < 1:
        raise ConfigError(f"train.dp_sgd.delta must be in (0, 1), got {shown(values['delta'])}")
    return SampleDP(*(float(values[key]) for key in KEYS), batches)


def check_delta(settings: SampleDP, sizes: Sequence[int]) -> None:
    """delta below 1/n for every client's n samples (``sizes``), else one line: with probability delta the
    guarantee may fail outright (a sample released whole), and Opacus's epsilon turns negative from delta ~0.1."""
    largest = max(sizes, default=0)
    if largest > 0 and not settings.delta < 1 / largest:
        below = 10.0 ** math.floor(math.log10(0.1 / largest))  # a round delta under 1/(10 n)
        default = " (the default)" if settings.delta == SampleDP.delta else ""
        raise ConfigError(f"train.dp_sgd.delta must be below 1/n = 1/{largest} (the largest client's samples), got "
                          f"{settings.delta:g}{default}: with probability delta the guarantee may fail outright, "
                          f"e.g. one sample released whole; set train.dp_sgd.delta: {below:g}, or below 1/n^2")


def poisson_batches(index: np.ndarray, steps: int, batch_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """``steps`` batches of ``index``, each taking every sample with probability B / |index| on its own (Poisson
    sampling, as the accountant assumes): B samples a batch on average, in the client's own order."""
    rate = min(1.0, batch_size / max(len(index), 1))
    return [index[rng.random(len(index)) < rate] for _ in range(steps)]


def _opacus() -> Any:
    try:
        import opacus
    except ImportError:
        raise ConfigError("train.dp_sgd needs Opacus: pip install 'fedaccel[privacy]' (make install installs it)") from None
    return opacus


def check_model(module: nn.Module, name: str) -> None:
    """Refuse, in one line, a model Opacus cannot take per-sample gradients of (its validator's first complaint)."""
    opacus = _opacus()
    from opacus.validators import ModuleValidator

    errors = ModuleValidator.validate(module, strict=False)
    if errors:
        reason = str(errors[0]).splitlines()[0].split(". ")[0].rstrip(".")
        raise ConfigError(f"train.dp_sgd: Opacus cannot train model {name}: {reason}")
    try:
        opacus.GradSampleModule(module).remove_hooks()
    except NotImplementedError as exc:
        raise ConfigError(f"train.dp_sgd: Opacus cannot train model {name}: {str(exc).splitlines()[0]}") from None


def per_sample(module: nn.Module) -> Any:
    """Opacus's ``GradSampleModule`` around ``module`` (its hooks record per-sample gradients in training
    backward passes only: evaluation under no_grad is untouched). One per federation."""
    return _opacus().GradSampleModule(module, loss_reduction="mean")


class DPSGDGradient:
    """What ``train_local`` asks of a gradient (``gather``, ``sgd_step``, ``__call__``), as Opacus's DP-SGD
    gradient: per-sample clipped, noised, divided by the batch size, written into the flat gradient buffer."""

    def __init__(self, model: Any, sampled: Any, x: Tensor, y: Tensor, loss_fn: Any, settings: SampleDP,
                 batch_size: int, noise_seed: int) -> None:
        _opacus()
        from opacus.optimizers import DPOptimizer

        self.model, self.sampled, self.x, self.labels, self.loss_fn = model, sampled, x, y, loss_fn
        self.params = [p for p in model.module.parameters() if p.requires_grad]
        self.views = [model.grad[a:b].view_as(p) for p, (a, b) in zip(self.params, _spans(self.params), strict=True)]
        generator = torch.Generator(device=x.device).manual_seed(noise_seed)
        self.optimizer = DPOptimizer(torch.optim.SGD(self.params, lr=0.0), noise_multiplier=settings.noise_multiplier,
                                     max_grad_norm=settings.clip, expected_batch_size=batch_size,
                                     loss_reduction="mean", generator=generator)

    def gather(self, idx: Tensor) -> tuple[Tensor, Tensor]:
        return self.x.index_select(0, idx), self.labels.index_select(0, idx)

    def sgd_step(self) -> None:
        return None  # every step reads the private gradient

    def __call__(self, xb: Tensor, lb: Tensor) -> Tensor:
        for p, view in zip(self.params, self.views, strict=True):
            view.zero_()
            p.grad = view
        with torch.enable_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # Opacus's advice on secure RNG: the seeded one is chosen
            self.loss_fn(self.sampled(xb), lb).backward()
            self.optimizer.pre_step()  # clip per sample, sum, add the noise, divide by B: into p.grad
        for p, view in zip(self.params, self.views, strict=True):
            view.copy_(p.grad)
        self.optimizer.zero_grad(set_to_none=False)  # Opacus's per-sample buffers go
        for p, view in zip(self.params, self.views, strict=True):
            p.grad = view
        return self.model.grad


def _spans(params: Sequence[Tensor]) -> list[tuple[int, int]]:
    """Each parameter's slice of the flat vector, in order (fedaccel.engine.flat lays them out so)."""
    ends = np.cumsum([p.numel() for p in params]).tolist()
    return list(zip([0, *ends[:-1]], ends, strict=True))


def noise_seed(seed: int, round_: int, client: int) -> int:
    return int(make_rng(seed, "dp-sgd", round_, client).integers(2**63 - 1))


@functools.lru_cache(maxsize=4096)
def sample_epsilon(settings: SampleDP, sample_rate: float, steps: int) -> float:
    """epsilon(delta) after ``steps`` DP-SGD steps at ``sample_rate``: Opacus's RDP accountant (0 before any)."""
    if steps <= 0:
        return 0.0
    _opacus()
    from opacus.accountants import RDPAccountant
    from opacus.accountants.analysis import rdp as analysis

    orders = RDPAccountant.DEFAULT_ALPHAS
    rdp = analysis.compute_rdp(q=min(1.0, sample_rate), noise_multiplier=settings.noise_multiplier, steps=steps,
                               orders=orders)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "optimal order is the largest alpha": its advice only
        eps, _ = analysis.get_privacy_spent(orders=orders, rdp=rdp, delta=settings.delta)
    return max(float(eps), 0.0)  # the conversion's bound can fall below 0 at a large delta; epsilon cannot


def step_counter() -> Part:
    """The part whose client state is the number of DP-SGD steps the client has taken (it uploads nothing)."""
    return Part(name=PART_NAME, init_client=lambda _w0: 0,
                client_end=lambda ctx, _w, _t0, _te, _ss, cs: (cs + ctx.steps, {}))


def epsilon_columns(settings: SampleDP | None, steps: Sequence[int], sizes: Sequence[int], batch_size: int
                    ) -> dict[str, Any]:
    """The row's ``sample_epsilon`` (the largest of any client: the guarantee every client's samples have) and
    ``sample_epsilon_clients`` (each client's, by client index); nothing without DP-SGD."""
    if settings is None:
        return {}
    each = [sample_epsilon(settings, batch_size / size, int(k)) for k, size in zip(steps, sizes, strict=True)]
    return {"sample_epsilon": max(each, default=0.0), "sample_epsilon_clients": [round(e, 6) for e in each]}
