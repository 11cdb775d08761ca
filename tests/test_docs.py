"""The documentation: the README stays a front page whose commands work, the configuration reference
is what the schema says, and the site builds with --strict (broken links fail it)."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedaccel.cli import build_parser, main
from fedaccel.runs import config_reference

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_README_WORDS = 1500
# the tour's commands at a tiny size: digits instead of Fashion-MNIST (it ships with scikit-learn), 2 rounds
TINY = ["--set", "data.dataset=digits", "--set", "train.rounds=2", "--set", "eval.train_samples=200",
        "--set", "run.progress=false", "--set", "run.threads=1"]
NOT_RUN_BY_THE_TOUR_TEST = {"deploy", "reproduce"}  # minutes of processes: tests/test_flower.py, test_reproductions.py


def readme_commands(text: str) -> list[list[str]]:
    """Every `fedaccel ...` command of the shell code blocks in ``text``, its words after `fedaccel` (comments
    dropped, continued lines joined, commands chained with && or ; taken one by one)."""
    commands = []
    for block in re.findall(r"```(?:bash|sh|shell)\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True  # words as a shell splits them, with ; && | as words of their own
            words = list(lexer)
            chained = [[]]
            for word in words:
                if word in ("&&", "||", ";", "|"):
                    chained.append([])
                else:
                    chained[-1].append(word)
            commands += [c[1:] for c in chained if c[:1] == ["fedaccel"]]
    return commands


def test_readme_is_a_front_page() -> None:
    words = len(README.read_text(encoding="utf-8").split())
    assert words <= MAX_README_WORDS, f"README.md has {words} words (at most {MAX_README_WORDS}): move detail to docs/"


def test_readme_links_lead_to_files_of_the_repository() -> None:
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text(encoding="utf-8"))
    local = [t for t in targets if "://" not in t]
    assert local, "the README links to the documentation"
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"README links to files that do not exist: {missing}"


def test_every_readme_command_parses() -> None:
    commands = readme_commands(README.read_text(encoding="utf-8"))
    assert {c[0] for c in commands} >= {"run", "experiment", "judge", "plot", "compare"}  # the tour
    parser = build_parser()
    for command in commands:
        try:
            parser.parse_args(command)
        except SystemExit:
            pytest.fail(f"README command does not parse: fedaccel {' '.join(command)}")


def test_at_tiny_size_runs_in_this_process_on_digits() -> None:
    assert _at_tiny_size(["experiment", "experiments/demo.yaml", "-j", "2"]) == [
        "experiment", str(ROOT / "experiments/demo.yaml"), *TINY]
    assert _at_tiny_size(["judge", "runs/x", "--plan"]) == ["judge", "runs/x", "--plan"]


def test_every_command_of_the_docs_parses() -> None:
    pages = sorted((ROOT / "docs").rglob("*.md"))
    commands = [(page, c) for page in pages for c in readme_commands(page.read_text(encoding="utf-8"))]
    assert len(commands) > 20
    parser = build_parser()
    for page, command in commands:
        try:
            parser.parse_args(["2" if w == "N" else w for w in command])  # N: a placeholder for a number
        except SystemExit:
            pytest.fail(f"{page.relative_to(ROOT)}: command does not parse: fedaccel {' '.join(command)}")


def test_the_api_reference_renders_no_raw_sphinx_role() -> None:
    """mkdocstrings prints ``:class:`X``` as it is: the docstrings docs/reference/api.md and parts.md render link
    with ``[X][dotted.path]`` (or name a thing it does not render in backticks)."""
    import inspect

    rendered = [path for page in ("api.md", "parts.md") for path in re.findall(
        r"^::: (\S+)", (ROOT / "docs/reference" / page).read_text(encoding="utf-8"), re.M)]
    assert len(rendered) > 20
    for path in rendered:
        module, _, name = path.rpartition(".")
        thing = getattr(importlib.import_module(module), name)
        members = [v for k, v in vars(thing).items() if not k.startswith("_")] if inspect.isclass(thing) else []
        for doc in [inspect.getdoc(thing), *(inspect.getdoc(m) for m in members if inspect.isfunction(m) or
                                             isinstance(m, property))]:
            assert not re.search(r":(class|func|mod|data|meth|attr):`", doc or ""), (path, doc)


def test_readme_commands_finds_commands_and_drops_comments() -> None:
    text = ("```bash\nfedaccel run a.yaml --set x=1   # note\nls\n```\n```yaml\nfedaccel: no\n```\n"
            "`fedaccel judge` inline\n```bash\nfedaccel plot r \\\n  -o c.png && fedaccel compare r; ls\n```\n")
    assert readme_commands(text) == [["run", "a.yaml", "--set", "x=1"], ["plot", "r", "-o", "c.png"], ["compare", "r"]]


def _at_tiny_size(command: list[str]) -> list[str]:
    """``command`` with the repository's files as absolute paths and, for what trains, the tiny size, in this
    process (``-j N`` dropped: worker processes cost seconds each to start and have tests of their own)."""
    words = [str(ROOT / w) if w.startswith(("configs/", "experiments/")) else w for w in command]
    for flag in ("-j", "--workers"):
        while flag in words:
            at = words.index(flag)
            del words[at:at + 2]
    return words + TINY if words[0] in ("run", "experiment") else words


@pytest.mark.slow
def test_readme_tour_runs_at_a_tiny_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)  # runs/ lands here
    for command in readme_commands(README.read_text(encoding="utf-8")):
        if command[0] in NOT_RUN_BY_THE_TOUR_TEST:
            continue
        status = main(_at_tiny_size(command))
        assert status == 0, f"fedaccel {' '.join(command)} exited {status}: {capsys.readouterr().err[-2000:]}"
    assert (tmp_path / "runs/demo/table.md").is_file() and (tmp_path / "curves.png").is_file()
    assert (tmp_path / "runs/judge_demo/claims.json").is_file()


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


@given(st.lists(st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), max_size=40), min_size=1, max_size=3),
       st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), max_size=40))
def test_any_comment_text_is_carried_over_as_written(above: list[str], trailing: str) -> None:
    source = "class A:\n" + "".join(f"    # {line}\n" for line in above) + f"    x: int = 1  # {trailing}\n"
    parts = [" ".join(line.strip() for line in above if line.strip()), trailing.strip()]
    assert config_reference.field_comments(source) == {("A", "x"): "; ".join(p for p in parts if p)}


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
