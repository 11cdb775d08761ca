"""Any value given to any option of a built-in method or split builds, or is one line at load.

A new user's `--set algorithm.alpha=abc` was a 20-line TypeError from inside BHerd's range check, and so were
FedProx's `mu`, FedAvg's `server_lr`, FedAvgM's `momentum` and the Dirichlet split's `alpha`: each option is now
checked against its default's kind (a number, a name, true or false) before the method or split sees it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedaccel.algorithms.registry import RECIPES, keyword_defaults
from fedaccel.data.splits import SPLITS
from fedaccel.errors import ConfigError
from fedaccel.runs.config import from_dict, load_config

VALUES = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                   st.text(max_size=8), st.lists(st.integers(0, 3), max_size=3),
                   st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
OPTIONS = sorted((name, option) for name, recipe in RECIPES.items() for option in keyword_defaults(recipe.build))
SPLIT_OPTIONS = sorted((name, option) for name, split in SPLITS.items() for option in keyword_defaults(split))


def loads_or_one_line(overrides: list[str] | dict[str, Any]) -> None:
    try:
        load_config(None, overrides) if isinstance(overrides, list) else from_dict(overrides)
    except ConfigError as exc:
        assert "\n" not in str(exc), str(exc)


@settings(max_examples=300, deadline=None)
@given(where=st.sampled_from(OPTIONS), value=VALUES)
def test_any_value_of_any_method_option_builds_or_is_one_line(where: tuple[str, str], value: Any) -> None:
    name, option = where
    loads_or_one_line({"data": {"dataset": "digits", "clients": 4}, "model": "softmax",
                       "algorithm": {"name": name, option: value}})


@settings(max_examples=150, deadline=None)
@given(where=st.sampled_from(SPLIT_OPTIONS), value=VALUES)
def test_any_value_of_any_split_option_loads_or_is_one_line(where: tuple[str, str], value: Any) -> None:
    name, option = where
    loads_or_one_line({"data": {"dataset": "digits", "clients": 4, "split": {"name": name, option: value}},
                       "model": "softmax"})


@pytest.mark.parametrize("overrides, says", [
    (["algorithm=bherd", "algorithm.alpha=abc"], "algorithm 'bherd': alpha must be a number, got 'abc'"),
    (["algorithm=fedprox", "algorithm.mu=abc"], "algorithm 'fedprox': mu must be a number, got 'abc'"),
    (["algorithm=fedavg", "algorithm.server_lr=abc"], "algorithm 'fedavg': server_lr must be a number"),
    (["algorithm=fedavgm", "algorithm.momentum=x"], "algorithm 'fedavgm': momentum must be a number"),
    (["algorithm=fedgsnr", "algorithm.plan=3"], "algorithm 'fedgsnr': plan must be a name, got 3"),
    (["data.split=dirichlet", "data.split.alpha=abc"], "split 'dirichlet': alpha must be a number, got 'abc'"),
])
def test_a_value_of_the_wrong_kind_is_one_line_naming_the_option(overrides: list[str], says: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, ["data.dataset=digits", *overrides])
    assert str(err.value) == says or str(err.value).startswith(says), str(err.value)


def test_an_option_annotated_with_more_than_one_kind_is_left_to_its_recipe() -> None:
    """A plugin's ``schedule: float | str = 0.1`` takes 'cosine' (a review found it refused as 'must be a number');
    an option annotated with one kind, or not at all, is held to its default's."""
    from fedaccel.algorithms.registry import kind_checked

    def recipe(*, schedule: float | str = 0.1, lr: float = 0.1, steps=5, name: str = "x"):  # noqa: ANN202
        return None

    assert kind_checked(recipe) == {"lr": 0.1, "steps": 5, "name": "x"}
