"""A method's one display name, from its algorithm config: what progress lines, tables, legends,
``judge`` and error lines call it.

``bherd`` is ``bherd``; ``{name: bherd, alpha: 0.5}`` is ``bherd alpha=0.5``; a part composed onto a
method (``server_opt``, ``aggregate``, any option spelled as a mapping) follows it after ``+`` with its
own options: ``{name: fedavg, server_opt: {name: adam, lr: 0.1}}`` is ``fedavg + adam lr=0.1``, and
``{name: fedavg, dp: {clip: 0.08}}`` (a mapping without a name: by its key) is ``fedavg + dp clip=0.08``. Options
come in key order, so two spellings of one setting are one name. The name shows what the config spells,
not the method's defaults: ``bherd`` and ``bherd alpha=0.5`` are two names, as they are two groups of runs.

A grid's run folders keep their own names (``algorithm=bherd-0.5,run.seed=0``, see
:func:`fedaccel.grids.experiment.cell_name`): committed packed grids and ``--resume`` find cells by them.

Example:
    >>> method_name({"name": "bherd", "alpha": 0.5})
    'bherd alpha=0.5'
    >>> display_name({"name": "", "algorithm": {"name": "fedavg", "server_opt": {"name": "adam", "lr": 0.1}}})
    'fedavg + adam lr=0.1'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

#: Options composed onto a method as parts of their own (after ``+``), even when spelled by a bare name.
PART_KEYS = ("aggregate", "server_opt")


def method_name(algorithm: Any) -> str:
    """The display name of an ``algorithm`` config entry (a name or ``{name: ..., option: value}``)."""
    if not isinstance(algorithm, Mapping):
        return _value(algorithm)
    return _named(algorithm.get("name", "?"), algorithm, True)


def display_name(config: Mapping[str, Any], fallback: str = "") -> str:
    """A run's display name: its config's own ``name`` when set, else :func:`method_name` of its
    ``algorithm`` entry, else ``fallback`` (a folder name)."""
    return _config_named(config, fallback, method_name)


def family_name(config: Mapping[str, Any], fallback: str = "") -> str:
    """The method without its options: the config's ``name``, else the algorithm's name with the names of
    its parts (``fedavg + adam``). A figure's colour is keyed by it (:mod:`fedaccel.report.colors`)."""
    return _config_named(config, fallback, _family)


def _config_named(config: Mapping[str, Any], fallback: str, of_algorithm: Callable[[Any], str]) -> str:
    """The config's own ``name`` when set, else ``of_algorithm`` of its ``algorithm`` entry (with sample-level
    DP-SGD, ``train.dp_sgd``, as a part: ``fedavg + dp-sgd clip=1.0 ...``), else ``fallback``."""
    name = config.get("name") if isinstance(config, Mapping) else None
    if name:
        return str(name)
    algorithm = config.get("algorithm") if isinstance(config, Mapping) else None
    if algorithm in (None, "", {}):
        return fallback
    train = config.get("train")
    dp_sgd = train.get("dp_sgd") if isinstance(train, Mapping) else None
    if isinstance(dp_sgd, Mapping):  # a training change of every client, named as the method's parts are
        return of_algorithm({"name": "?", **(algorithm if isinstance(algorithm, Mapping) else {"name": algorithm}),
                             "dp-sgd": dict(dp_sgd)})
    return of_algorithm(algorithm)


def value_name(key: str, value: Any) -> str:
    """A config value as an error line shows it: an ``algorithm`` entry by its display name, anything
    else as YAML spells it inline."""
    from fedaccel.errors import spelled

    if key == "algorithm" and (isinstance(value, str) or isinstance(value, Mapping) and "name" in value):
        return method_name(value)
    return spelled(value)


def values_named(values: Mapping[str, Any]) -> str:
    """Grid values as an error line shows them: ``algorithm=bherd alpha=0.5, run.seed=0``."""
    return ", ".join(f"{key}={value_name(str(key), value)}" for key, value in values.items())


def _family(algorithm: Any) -> str:
    if not isinstance(algorithm, Mapping):
        return _value(algorithm)
    return _named(algorithm.get("name", "?"), algorithm, False)


def _named(head: Any, mapping: Mapping[str, Any], options: bool) -> str:
    """``head`` with the ``options`` of ``mapping`` (if asked), then its parts after ``+``: every option that is a
    mapping (named by its ``name``, else by its key: ``dp clip=0.08``) and a part key spelled by a bare name."""
    words, parts = [_value(head)], []
    for key in sorted((k for k in mapping if k != "name"), key=str):
        value = mapping[key]
        if value is None:  # an option set to none (server_opt: null): no part, no option
            continue
        if isinstance(value, Mapping):
            parts.append(_named(value.get("name", key), value, options))
        elif key in PART_KEYS and isinstance(value, str):
            parts.append(_value(value))
        elif options:
            words.append(f"{key}={_value(value)}")
    return " + ".join([" ".join(words), *parts])


def _value(value: Any) -> str:
    """A scalar as written (``0.5``, ``herding``), anything else as YAML spells it inline (``[a, b]``)."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(value)  # 1.0 as the file and the folder spell it
    from fedaccel.errors import spelled

    return spelled(value, 10**6)
