"""Named methods as recipes: each is ``compose(...)`` of parts, nothing more.

``build_algorithm("fedavg")`` returns the composed :class:`~fedaccel.algorithms.base.Algorithm`;
hyperparameters are the recipe's keyword arguments and are checked here, so a config with an
unknown or invalid one fails at load. Two keys go with every recipe (:data:`EVERY_RECIPE`):
``server_opt`` (a server optimiser after the method's own step) and ``aggregate`` (a robust rule in
place of the weighted mean), e.g. ``{name: bherd, server_opt: {name: adam, lr: 0.01}, aggregate: median}``.

Installed packages add methods through the entry-point group ``fedaccel.algorithms`` (:mod:`fedaccel.plugins`):
the object an entry point names is a recipe like the functions below (keyword-only hyperparameters with their
defaults, an ``Algorithm`` returned). :func:`get_recipe` finds built-ins first, then plugins; a name both
declare is refused.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import fedaccel.plugins as plugins
from fedaccel.algorithms.base import Algorithm, Part, compose
from fedaccel.algorithms.bherd import bherd_selection
from fedaccel.algorithms.dp import dp_settings, with_dp
from fedaccel.algorithms.fednova import fednova_aggregate
from fedaccel.algorithms.grab import grab_selection
from fedaccel.algorithms.grab_reorder import grab_reordering
from fedaccel.algorithms.guard import guarded
from fedaccel.algorithms.scaffold import model_weighting
from fedaccel.algorithms.scaffold import scaffold as scaffold_controls
from fedaccel.algorithms.feddc import feddc as feddc_part
from fedaccel.algorithms.feddyn import feddyn as feddyn_part
from fedaccel.algorithms.fedgsnr import fedgsnr_planning
from fedaccel.algorithms.fedprox import fedprox as fedprox_term
from fedaccel.algorithms.fedumf import fedumf as fedumf_part
from fedaccel.algorithms.mean import mean_aggregate
from fedaccel.algorithms.robust import RULES, with_robust_aggregate
from fedaccel.algorithms.server_opt import PART_NAME as SERVER_OPT
from fedaccel.algorithms.server_opt import (
    SERVER_OPTIMISERS,
    check_settings,
    server_adagrad,
    server_adam,
    server_avgm,
    server_yogi,
)
from fedaccel.errors import ConfigError, listed, shown


@dataclass(frozen=True)
class Recipe:
    """A named method: how to build it, and whether it trains on all data at one client."""

    build: Callable[..., Algorithm]
    summary: str
    centralized: bool = False
    plugin: plugins.Plugin | None = None  # the installed distribution's entry point it came from (None: built in)


def fedavg(*, server_lr: float = 1.0) -> Algorithm:
    """FedAvg (McMahan et al., 2017): local SGD, data-weighted mean of the client models."""
    return compose("fedavg", mean_aggregate(server_lr=server_lr))


# --- Server optimisers (Hsu et al. 2019; Reddi et al. 2021): FedAvg's mean, then the optimiser -----
# eta_s has no paper default (both papers tune it per task); Algorithm 2's beta1 = 0.9, beta2 = 0.99, and
# tau = 1e-3 (docs/algorithms.md "Server optimisers").


def fedavgm(*, server_lr: float = 1.0, momentum: float = 0.9) -> Algorithm:
    """FedAvgM (Hsu et al., 2019): server momentum on FedAvg's step, m = beta m + Delta, w + eta_s m."""
    check_settings("algorithm.", server_lr, "server_lr", momentum=momentum)  # the keys as the recipe spells them
    return compose("fedavgm", mean_aggregate(), server_avgm(lr=server_lr, momentum=momentum))


def fedadagrad(*, server_lr: float = 0.01, beta1: float = 0.9, tau: float = 1e-3, variant: str = "paper") -> Algorithm:
    """FedAdagrad (Reddi et al., 2021, Algorithm 2) on FedAvg's step; ``variant: flower`` is Flower's."""
    check_settings("algorithm.", server_lr, "server_lr", beta1=beta1)
    return compose("fedadagrad", mean_aggregate(), server_adagrad(lr=server_lr, beta1=beta1, tau=tau, variant=variant))


def fedadam(
    *, server_lr: float = 0.01, beta1: float = 0.9, beta2: float = 0.99, tau: float = 1e-3, variant: str = "paper"
) -> Algorithm:
    """FedAdam (Reddi et al., 2021, Algorithm 2: no bias correction) on FedAvg's step."""
    check_settings("algorithm.", server_lr, "server_lr", beta1=beta1, beta2=beta2)
    part = server_adam(lr=server_lr, beta1=beta1, beta2=beta2, tau=tau, variant=variant)
    return compose("fedadam", mean_aggregate(), part)


def fedyogi(
    *, server_lr: float = 0.01, beta1: float = 0.9, beta2: float = 0.99, tau: float = 1e-3, variant: str = "paper"
) -> Algorithm:
    """FedYogi (Reddi et al., 2021, Algorithm 2) on FedAvg's step."""
    check_settings("algorithm.", server_lr, "server_lr", beta1=beta1, beta2=beta2)
    part = server_yogi(lr=server_lr, beta1=beta1, beta2=beta2, tau=tau, variant=variant)
    return compose("fedyogi", mean_aggregate(), part)


def centralized() -> Algorithm:
    """Centralized SGD: one client holding all training data; one round = E epochs."""
    return compose("centralized", mean_aggregate())


# --- FedProx and FedGSNR (paper 003) recipes ---------------------------------------------------


def fedprox(*, mu: float = 0.01) -> Algorithm:
    """FedProx (Li et al., 2020): local proximal term mu (theta - w_t), weighted model average."""
    return compose("fedprox", fedprox_term(mu=mu), mean_aggregate())


def fedgsnr(*, samples: int = 64, e_const: int = 20, plan: str = "gsnr") -> Algorithm:
    """FedGSNR with FedAvg (paper 003, Algorithm 1): planned local steps E_k, weighted average.

    ``plan`` = uniform / random / dirichlet / data splits the same steps otherwise (controls).
    """
    return compose("fedgsnr", fedgsnr_planning(samples=samples, e_const=e_const, plan=plan), mean_aggregate())


def fedgsnr_fedprox(*, samples: int = 64, e_const: int = 20, mu: float = 0.01, plan: str = "gsnr") -> Algorithm:
    """FedGSNR with FedProx (paper 003, Table 1): planned local steps, proximal local term."""
    return compose(
        "fedgsnr-fedprox",
        fedgsnr_planning(samples=samples, e_const=e_const, plan=plan),
        fedprox_term(mu=mu),
        mean_aggregate(),
    )


def fedgsnr_scaffold(
    *, samples: int = 64, e_const: int = 20, server_lr: float = 1.0, weighting: str = "data", plan: str = "gsnr",
    control_lr: str = "current", control_steps: str = "client",
) -> Algorithm:
    """FedGSNR with SCAFFOLD (paper 003, Table 1): planned local steps, control-variate correction."""
    return compose(
        "fedgsnr-scaffold",
        fedgsnr_planning(samples=samples, e_const=e_const, plan=plan),
        scaffold_controls(weighting=weighting, control_lr=control_lr, control_steps=control_steps),
        mean_aggregate(server_lr=server_lr, weighting=model_weighting(weighting)),
    )


# --- end FedProx and FedGSNR recipes ------------------------------------------------------------


# --- FedUMF (paper 004), FedDyn and FedDC recipes -----------------------------------------------
# The server averages as the method's own reference does: FedUMF like FedAvg (data weights; the
# paper's 1/M on its equal-size splits), FedDyn/FedDC unweighted (gaoliang13/FedDC).


def fedumf(*, fraction: float = 0.1, alpha: float = 1.0, weighting: str = "data") -> Algorithm:
    """FedUMF with FedAvg (paper 004, Algorithm 1): all clients train, a fraction C uploads."""
    return compose("fedumf", fedumf_part(fraction=fraction, alpha=alpha), mean_aggregate(weighting=weighting))


def feddyn(*, alpha: float = 0.01, weighting: str = "uniform") -> Algorithm:
    """FedDyn (Acar et al., 2021): dynamic regulariser h_i, server adds the mean drift."""
    return compose("feddyn", feddyn_part(alpha=alpha), mean_aggregate(weighting=weighting))


def feddc(
    *, alpha: float = 0.01, weighting: str = "uniform", control_lr: str = "current", control_steps: str = "client"
) -> Algorithm:
    """FedDC (Gao et al., 2022): drift h_i and gradient correction G_i, server adds the mean drift."""
    part = feddc_part(alpha=alpha, control_lr=control_lr, control_steps=control_steps)
    return compose("feddc", part, mean_aggregate(weighting=weighting))


def fedumf_feddc(
    *, fraction: float = 0.1, alpha: float = 1.0, feddc_alpha: float = 0.01, weighting: str = "uniform",
    control_lr: str = "current", control_steps: str = "client",
) -> Algorithm:
    """FedUMF with FedDC: all clients train with FedDC's terms, a fraction C uploads and fuses."""
    return compose(
        "fedumf-feddc",
        fedumf_part(fraction=fraction, alpha=alpha),
        feddc_part(alpha=feddc_alpha, control_lr=control_lr, control_steps=control_steps),
        mean_aggregate(weighting=weighting),
    )


def fedumf_fedprox(
    *, fraction: float = 0.1, alpha: float = 1.0, mu: float = 0.01, weighting: str = "data"
) -> Algorithm:
    """FedUMF with FedProx: all clients train with the proximal term, a fraction uploads."""
    return compose(
        "fedumf-fedprox",
        fedumf_part(fraction=fraction, alpha=alpha),
        fedprox_term(mu=mu),
        mean_aggregate(weighting=weighting),
    )



def fedumf_scaffold(
    *, fraction: float = 0.1, alpha: float = 1.0, server_lr: float = 1.0, weighting: str = "data",
    control_lr: str = "current", control_steps: str = "client",
) -> Algorithm:
    """FedUMF with SCAFFOLD: all clients train with the control correction, a fraction uploads.

    The controls follow the real local trajectory (fused start to end), so the fused update
    does not leak into c_i; unauthorised clients keep their c_i (docs/algorithms.md).
    """
    return compose(
        "fedumf-scaffold",
        fedumf_part(fraction=fraction, alpha=alpha),
        scaffold_controls(weighting=weighting, control_lr=control_lr, control_steps=control_steps),
        mean_aggregate(server_lr=server_lr, weighting=model_weighting(weighting)),
    )

# --- end FedUMF, FedDyn and FedDC recipes -------------------------------------------------------


# --- BHerd family (paper 000): BHerd, GraB-FedAvg, FedNova, SCAFFOLD and combinations -----------
# BHerd is an update estimator (docs/algorithms.md): it replaces a client's full update by
# (eta/alpha) times the sum of its herded directions, whatever aggregator or local terms surround it.


def bherd_fedavg(*, alpha: float = 0.5, selection: str = "herding") -> Algorithm:
    """BHerd-FedAvg (paper 000, Algorithm 3): herded local gradients, w - (eta/alpha) sum p_i g_i.

    ``selection: random`` is the control: the same number of steps, chosen at random, the same eta/alpha."""
    return compose("bherd-fedavg", bherd_selection(alpha=alpha, selection=selection), mean_aggregate())


def grab_fedavg(*, variant: str = "paper", ties: str | None = None, centre: str = "running") -> Algorithm:
    """GraB-FedAvg (paper 000, Algorithm 4): online balancing keeps steps, server rescales by 1/alpha_t.

    ``variant: fixed`` keeps the first step (ties keep) and rescales each client by its own 1/alpha_i;
    ``ties: strict | keep`` sets the tie rule alone (null: the variant's; GraB's reference code keeps ties);
    ``centre: running | stale`` centres on the running sum (Algorithm 4) or the previous round's mean (GraB's)."""
    return compose("grab-fedavg", grab_selection(variant=variant, ties=ties, centre=centre), mean_aggregate())


def grab_reorder() -> Algorithm:
    """GraB (Lu et al., 2022) as its authors run it: every local step taken, online balancing orders the
    client's samples for its next round (previous round's mean as centre); the plain FedAvg update."""
    return compose("grab-reorder", grab_reordering(), mean_aggregate())


def fednova(*, mu: float = 0.0, tau_eff: str = "normalisers", gmf: float = 0.0) -> Algorithm:
    """FedNova (Wang et al., 2020): updates normalised by a_i; mu > 0 adds FedProx's local term.

    ``tau_eff: steps`` (sum p_i tau_i when mu > 0) and server momentum ``gmf``: the reference code's options."""
    local = (fedprox_term(mu=mu),) if mu > 0 else ()
    return compose("fednova", *local, fednova_aggregate(mu=mu, tau_eff=tau_eff, gmf=gmf))


def scaffold(
    *, server_lr: float = 1.0, weighting: str = "data", control_lr: str = "current", control_steps: str = "client"
) -> Algorithm:
    """SCAFFOLD (Karimireddy et al., 2020), option II, server learning rate eta_g; ``control_lr``/``control_steps``:
    the step 1/(tau_i eta_t) or the reference code's 1/(K eta_0) (docs/algorithms.md "Reference code")."""
    return compose(
        "scaffold",
        scaffold_controls(weighting=weighting, control_lr=control_lr, control_steps=control_steps),
        mean_aggregate(server_lr=server_lr, weighting=model_weighting(weighting)),
    )


def bherd_fednova(*, alpha: float = 0.5, selection: str = "herding") -> Algorithm:
    """BHerd-FedNova: FedNova normalises the herded estimate as it would the full update."""
    return compose("bherd-fednova", bherd_selection(alpha=alpha, selection=selection), fednova_aggregate())


def bherd_scaffold(
    *, alpha: float = 0.5, server_lr: float = 1.0, weighting: str = "data", selection: str = "herding",
    control_lr: str = "current", control_steps: str = "client",
) -> Algorithm:
    """BHerd-SCAFFOLD: herds the SCAFFOLD-corrected directions; controls follow the real trajectory."""
    return compose(
        "bherd-scaffold",
        scaffold_controls(weighting=weighting, control_lr=control_lr, control_steps=control_steps),
        bherd_selection(alpha=alpha, selection=selection),
        mean_aggregate(server_lr=server_lr, weighting=model_weighting(weighting)),
    )


def bherd_fedprox(*, alpha: float = 0.5, mu: float = 0.01, selection: str = "herding") -> Algorithm:
    """BHerd-FedProx: herds the FedProx-corrected directions (the proximal term in each step's direction)."""
    return compose("bherd-fedprox", fedprox_term(mu=mu), bherd_selection(alpha=alpha, selection=selection),
                   mean_aggregate())


# --- the three papers' methods with each other ---------------------------------------------------
# Each is its methods' parts in one recipe, composed as with the baselines: FedGSNR plans a client's steps, BHerd
# herds the directions of those steps, FedUMF has every client train and fuses its stored update, which is the
# real local update (end minus start, as with SCAFFOLD's controls), while the upload is BHerd's estimate of it
# plus the fused part (fedaccel.engine.round: delta = estimate + (w - theta0)).


def fedgsnr_bherd(*, samples: int = 64, e_const: int = 20, plan: str = "gsnr", alpha: float = 0.5,
                  selection: str = "herding") -> Algorithm:
    """FedGSNR with BHerd-FedAvg: planned local steps per client, the herd of their directions uploaded."""
    return compose("fedgsnr-bherd", fedgsnr_planning(samples=samples, e_const=e_const, plan=plan),
                   bherd_selection(alpha=alpha, selection=selection), mean_aggregate())


def fedumf_bherd(*, fraction: float = 0.1, alpha: float = 1.0, bherd_alpha: float = 0.5, selection: str = "herding",
                 weighting: str = "data") -> Algorithm:
    """FedUMF with BHerd-FedAvg: all clients train, a fraction C uploads the herd of its directions and fuses.

    ``alpha`` is FedUMF's fusion coefficient (as in every fedumf-* recipe), ``bherd_alpha`` BHerd's fraction."""
    if not 0 < bherd_alpha <= 1:  # BHerd's own check would call it alpha, which here is FedUMF's
        raise ConfigError(f"fedumf-bherd bherd_alpha (BHerd's fraction of steps) must be in (0, 1], got {bherd_alpha}")
    return compose("fedumf-bherd", fedumf_part(fraction=fraction, alpha=alpha),
                   bherd_selection(alpha=bherd_alpha, selection=selection), mean_aggregate(weighting=weighting))


def fedgsnr_fedumf(*, samples: int = 64, e_const: int = 20, plan: str = "gsnr", fraction: float = 0.1,
                   alpha: float = 1.0, weighting: str = "data") -> Algorithm:
    """FedGSNR with FedUMF: every client trains its planned steps, a fraction C uploads and fuses."""
    return compose("fedgsnr-fedumf", fedgsnr_planning(samples=samples, e_const=e_const, plan=plan),
                   fedumf_part(fraction=fraction, alpha=alpha), mean_aggregate(weighting=weighting))


# --- end BHerd family recipes --------------------------------------------------------------------


RECIPES: dict[str, Recipe] = {
    "fedavg": Recipe(fedavg, "FedAvg: local SGD, weighted model average"),
    "fedavgm": Recipe(fedavgm, "FedAvgM: FedAvg with server momentum"),
    "fedadagrad": Recipe(fedadagrad, "FedAdagrad: FedAvg's step through a server Adagrad"),
    "fedadam": Recipe(fedadam, "FedAdam: FedAvg's step through a server Adam"),
    "fedyogi": Recipe(fedyogi, "FedYogi: FedAvg's step through a server Yogi"),
    "centralized": Recipe(centralized, "centralized SGD on all data (reference curve)", centralized=True),
    "fedprox": Recipe(fedprox, "FedProx: local proximal term mu, weighted model average"),
    "fedgsnr": Recipe(fedgsnr, "FedGSNR with FedAvg: local steps per client from gradient statistics"),
    "fedgsnr-fedprox": Recipe(fedgsnr_fedprox, "FedGSNR with FedProx: planned local steps, proximal term"),
    "fedgsnr-scaffold": Recipe(fedgsnr_scaffold, "FedGSNR with SCAFFOLD: planned local steps, control variates"),
    "fedumf": Recipe(fedumf, "FedUMF with FedAvg: all clients train, a fraction C uploads and fuses"),
    "feddyn": Recipe(feddyn, "FedDyn: dynamic regulariser per client, server adds the mean drift"),
    "feddc": Recipe(feddc, "FedDC: local drift and gradient correction per client"),
    "fedumf-feddc": Recipe(fedumf_feddc, "FedUMF with FedDC terms in local training"),
    "fedumf-fedprox": Recipe(fedumf_fedprox, "FedUMF with FedProx's proximal term"),
    "fedumf-scaffold": Recipe(fedumf_scaffold, "FedUMF with SCAFFOLD's control variates"),
    "bherd": Recipe(bherd_fedavg, "BHerd-FedAvg: upload the herd of local gradients closest to their mean"),
    "bherd-fedavg": Recipe(bherd_fedavg, "BHerd-FedAvg (same as bherd)"),
    "grab-fedavg": Recipe(grab_fedavg, "GraB-FedAvg: online gradient balancing keeps local steps"),
    "grab-reorder": Recipe(grab_reorder, "GraB: balancing orders each client's next epoch, FedAvg update"),
    "fednova": Recipe(fednova, "FedNova: normalised averaging of local updates"),
    "scaffold": Recipe(scaffold, "SCAFFOLD: control variates correct the client drift (option II)"),
    "bherd-fednova": Recipe(bherd_fednova, "BHerd with FedNova's normalised averaging"),
    "bherd-scaffold": Recipe(bherd_scaffold, "BHerd herding SCAFFOLD-corrected local gradients"),
    "bherd-fedprox": Recipe(bherd_fedprox, "BHerd herding FedProx-corrected local gradients"),
    "fedgsnr-bherd": Recipe(fedgsnr_bherd, "FedGSNR with BHerd: planned local steps, the herd of them uploaded"),
    "fedumf-bherd": Recipe(fedumf_bherd, "FedUMF with BHerd: all clients train, a fraction uploads its herd and fuses"),
    "fedgsnr-fedumf": Recipe(fedgsnr_fedumf, "FedGSNR with FedUMF: all clients train planned steps, a fraction uploads"),
}


EVERY_RECIPE: dict[str, Any] = {"server_opt": None, "aggregate": None, "dp": None}  # keys every recipe takes (null: none)


def keyword_defaults(function: Callable[..., Any]) -> dict[str, Any]:
    """``function``'s keyword-only parameters and their defaults."""
    return {
        k: p.default
        for k, p in inspect.signature(function).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }


SCALARS = ("float", "int", "str", "bool")  # annotations that name one kind: the default's kind is the option's


def kind_checked(function: Callable[..., Any]) -> dict[str, Any]:
    """``function``'s keyword-only parameters whose value must be of their default's kind (:func:`option_fault`):
    those annotated with one scalar type, or not at all (a parameter annotated ``float | str``, a plugin's
    schedule say, takes either, and its recipe checks it)."""
    return {k: p.default for k, p in inspect.signature(function).parameters.items()
            if p.kind is inspect.Parameter.KEYWORD_ONLY and (
                p.annotation is inspect.Parameter.empty
                or getattr(p.annotation, "__name__", p.annotation) in SCALARS)}


def check_option_kinds(where: str, function: Callable[..., Any], params: Mapping[str, Any]) -> None:
    """Every option of ``params`` that ``function`` holds to its default's kind (:func:`kind_checked`) is of that
    kind; else one line starting with ``where``."""
    checked = kind_checked(function)
    whole = {k for k, p in inspect.signature(function).parameters.items()
             if getattr(p.annotation, "__name__", p.annotation) == "int"}  # `k: int = 3` takes no 2.5
    for option, value in params.items():
        if option in checked and (what := option_fault(value, checked[option])) is not None:
            raise ConfigError(f"{where}: {option} must be {what}, got {shown(value)}")
        if option in whole and not (isinstance(value, int) and not isinstance(value, bool)) and value is not None:
            raise ConfigError(f"{where}: {option} must be a whole number (its recipe says int), got {shown(value)}")


def hyperparameters(name: str) -> dict[str, Any]:
    """The recipe's hyperparameters and their defaults, with the keys every recipe takes."""
    return {**keyword_defaults(get_recipe(name).build), **EVERY_RECIPE}


def named_spec(spec: Any, key: str, table: Mapping[str, Callable[..., Any]]) -> tuple[str, dict[str, Any]]:
    """``algorithm.<key>``: a name, or ``{name: ..., option: value}`` with the options of ``table[name]``
    (``server_lr`` is the recipe's, not the rule's); unknown names, options and values fail in one line."""
    if isinstance(spec, str):
        name, params = spec, {}
    elif isinstance(spec, Mapping) and isinstance(spec.get("name"), str):
        name, params = spec["name"], {k: v for k, v in spec.items() if k != "name"}
    else:
        raise ConfigError(f"algorithm.{key} must be a name or {{name: ..., ...}}, got {shown(spec)}")
    if name not in table:
        raise ConfigError(f"unknown algorithm.{key} {shown(name)}; known: {listed(sorted(table), near=name)}")
    defaults = {k: v for k, v in keyword_defaults(table[name]).items() if not (key == "aggregate" and k == "server_lr")}
    for option, value in params.items():
        if option not in defaults:
            raise ConfigError(f"algorithm.{key} {name} has no option {shown(option)}; "
                              f"known: {listed(sorted(defaults), near=str(option))}")
        if value is None and defaults[option] is None:
            continue
        if (what := option_fault(value, defaults[option], anything=False)) is not None:
            raise ConfigError(f"algorithm.{key} {name}: {option} must be {what}, got {shown(value)}")
    return name, params


def option_fault(value: Any, default: Any, *, anything: bool = True) -> str | None:
    """What ``value`` must be, given as an option whose default is ``default`` (a number for a number, a name for a
    name, true or false for a flag), or None where it is that. ``anything``: a default of another kind (None, say)
    takes any value (its recipe checks it); else such a default asks for a number."""
    if isinstance(default, bool):
        return None if isinstance(value, bool) else "true or false"
    if isinstance(default, str):
        return None if isinstance(value, str) else "a name"
    if isinstance(default, (int, float)) or not anything:
        return None if isinstance(value, (int, float)) and not isinstance(value, bool) else "a number"
    return None


def get_recipe(name: str) -> Recipe:
    """The built-in recipe ``name``, else the installed plugin's (loaded now, once per process)."""
    plugin = plugins.find("algorithm", name, builtin=name in RECIPES)
    if plugin is not None:
        return plugin_recipe(plugin)
    if name not in RECIPES:
        raise ConfigError(f"unknown algorithm {shown(name)}; known: {listed(algorithm_names(), near=name)} "
                          "(your own: docs/your-method.md)")
    return RECIPES[name]


def algorithm_names() -> list[str]:
    """Every name ``algorithm:`` takes here: the built-ins, then the installed plugins'."""
    return sorted(RECIPES) + [n for n in plugins.names("algorithm") if n not in RECIPES]


def listing() -> list[tuple[str, str]]:
    """(name, what it is) for every method ``algorithm:`` may name: the built-ins, then each plugin's entry point
    with its distribution, not imported (a plugin loads when its name is asked for); a clash is marked."""
    rows = [(name, recipe.summary) for name, recipe in RECIPES.items()]
    for name, found in sorted(plugins.declared("algorithm").items()):
        clash = (" (refused: a built-in method has this name)" if name in RECIPES else
                 " (refused: the name is declared twice)" if len(found) > 1 else
                 " (refused: not a name fedaccel takes: lower-case letters, digits, '-', '_', '.')"
                 if not plugins.NAME.fullmatch(name) else "")
        rows += [(name, f"{p.value} from {p.origin}{clash}") for p in found]
    return rows


@functools.lru_cache(maxsize=None)
def plugin_recipe(plugin: plugins.Plugin) -> Recipe:
    """A plugin's object as a :class:`Recipe`, checked as one: callable, every parameter keyword-only with a
    default (the config gives them by name, or leaves them at the default)."""
    build, where = plugins.load(plugin), f"algorithm {shown(plugin.name)} of {plugin.origin}"
    try:
        parameters = inspect.signature(build).parameters.values()
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: {plugin.value} is not a recipe (a function returning an Algorithm)") from None
    odd = [p.name for p in parameters if p.kind is not inspect.Parameter.KEYWORD_ONLY or p.default is p.empty]
    if odd:
        raise ConfigError(f"{where}: parameter {shown(odd[0])} of {plugin.value} must be keyword-only with a default "
                          "(def recipe(*, mu: float = 0.01) -> Algorithm)")

    @functools.wraps(build)
    def checked(**params: Any) -> Algorithm:
        try:
            algorithm = build(**params)
        except ConfigError:
            raise
        except Exception as exc:  # noqa: BLE001 - the plugin's own code: said in one line, the traceback on --debug
            raise ConfigError(f"{where} failed to build: {plugins.one_line(exc)}") from exc
        if not isinstance(algorithm, Algorithm):
            raise ConfigError(f"{where}: {plugin.value} returned {shown(type(algorithm).__name__)}, not an "
                              "Algorithm (compose(name, *parts))")
        return guarded(algorithm, where)  # its own stages' values checked on return (fedaccel.algorithms.guard)

    summary = (inspect.getdoc(build) or "").split("\n")[0] or "(no docstring)"
    return Recipe(checked, f"{summary} [{plugin.origin}]", plugin=plugin)


def with_server_opt(algorithm: Algorithm, optimiser: Part) -> Algorithm:
    """``algorithm`` with a server optimiser after every other part: its pseudo-gradient is the whole step
    of the method (aggregate and server states; docs/algorithms.md "Server optimisers")."""
    if any(p.name == SERVER_OPT for p in algorithm.parts):
        raise ConfigError(f"{algorithm.name} has a server optimiser already: tune its own hyperparameters, "
                          "or give algorithm.server_opt to fedavg")
    return compose(algorithm.name, *algorithm.parts, optimiser)


def build_algorithm(name: str, **params: Any) -> Algorithm:
    """Build a named method; unknown or invalid hyperparameters raise ConfigError. ``server_opt``,
    ``aggregate`` and ``dp`` (``EVERY_RECIPE``) add a server optimiser, replace the mean by a robust rule,
    and replace it by DP-FedAvg's clipped and noised mean (``fedaccel.algorithms.dp``; its ``dp`` mapping
    carries the run's population, which ``fedaccel.runs.config.build_algorithm_from`` adds). Unset
    hyperparameters take the recipe's defaults (``fedaccel algorithms``): fedumf's ``fraction`` is the paper's C =
    0.1 here, where a config or ``fedaccel.train(algorithm="fedumf")`` takes ``train.client_fraction``."""
    known = hyperparameters(name)
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ConfigError(f"algorithm {shown(name)} has no hyperparameter {shown(unknown[0])}; "
                          f"known: {listed(sorted(known), near=unknown[0])}")
    check_option_kinds(f"algorithm {shown(name)}", get_recipe(name).build, params)
    server_opt, rule, dp = params.pop("server_opt", None), params.pop("aggregate", None), params.pop("dp", None)
    algorithm = get_recipe(name).build(**params)
    own_optimiser = any(p.name == SERVER_OPT for p in algorithm.parts)  # fedadam's server_lr is eta_s
    server_lr = 1.0 if own_optimiser else params.get("server_lr", known.get("server_lr", 1.0))
    if rule is not None:
        rule_name, options = named_spec(rule, "aggregate", RULES)
        algorithm = with_robust_aggregate(algorithm, rule_name, options, server_lr=server_lr)
    if server_opt is not None:
        opt_name, options = named_spec(server_opt, "server_opt", SERVER_OPTIMISERS)
        algorithm = with_server_opt(algorithm, SERVER_OPTIMISERS[opt_name](**options))
    if dp is not None:  # after the rest: it checks every part against its guarantee
        planning = {key: params.get(key, known[key]) for key in ("samples", "e_const", "plan") if key in known}
        algorithm = with_dp(algorithm, dp_settings(dp), server_lr=server_lr, planning=planning or None)
    return algorithm
