"""The documentation: the README stays a front page whose commands work, the configuration reference
is what the schema says, and the site builds with --strict (broken links fail it)."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fedaccel.runs import config_reference

ROOT = Path(__file__).resolve().parents[1]


def test_configuration_reference_is_what_the_schema_says() -> None:
    committed = (ROOT / config_reference.PAGE).read_text(encoding="utf-8")
    assert committed == config_reference.render(), f"run `{config_reference.COMMAND}` and commit the page"


def test_every_config_key_is_in_the_reference_with_its_default() -> None:
    from fedaccel.runs.config import Config

    page = config_reference.render()
    for section in ("data", "train", "eval", "run"):
        for f in dataclasses.fields(getattr(Config(), section)):
            assert f"| `{section}.{f.name}` |" in page


def test_field_comments_joins_the_lines_above_and_the_trailing_one() -> None:
    source = (
        "class A:\n"
        "    x: int = 1  # one\n"
        "    # two, above\n"
        "    # and more\n"
        "    y: int = 2  # trailing\n"
        "\n"
        "    z: int = 3\n"
        "    # below z, above nothing\n"
    )
    assert config_reference.field_comments(source) == {
        ("A", "x"): "one", ("A", "y"): "two, above and more; trailing", ("A", "z"): "",
    }


def test_a_key_without_a_comment_is_refused() -> None:
    @dataclasses.dataclass
    class Bare:
        quiet: int = 0

    with pytest.raises(ValueError, match="Bare.quiet has no comment"):
        list(config_reference._sections(Bare, "", {}))


def test_shown_value_writes_defaults_as_yaml() -> None:
    assert [config_reference.shown_value(v) for v in (None, True, 0.01, "iid", {"name": "iid"}, ["a"], (1, 2))] == [
        "null", "true", "0.01", "iid", "{name: iid}", "[a]", "[1, 2]"]


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None, reason="mkdocs is not installed (pip install -e '.[docs]')")
def test_site_builds_strictly(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "site/reference/configuration/index.html").is_file()
