"""The tutorials (docs/tutorials/) at a tiny size: their files written, their commands run in order.

Tiny: digits instead of Fashion-MNIST, 2 rounds (tests/test_docs.py's TINY), in this process. The two-hosts
tutorial runs up to its prepared run folder: the printed commands are run on loopback by tests/test_flower.py
(test_a_prepared_run_with_too_few_supernodes_says_so_within_seconds_and_fails_in_one_line), a whole
deployment by test_deploy_on_loopback_gives_the_in_process_numbers_and_stops_its_processes.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from fedaccel.cli import build_parser, main
from tests.test_docs import ROOT, TINY, readme_commands

PAGES = ROOT / "docs" / "tutorials"
MINE = ("first-run.md", "your-claim.md", "two-hosts.md")


def files(text: str) -> dict[str, str]:
    """The files a tutorial has you write: its code blocks with a ``title="PATH"``."""
    return dict(re.findall(r'```\w+ title="([^"]+)"\n(.*?)```', text, re.S))


def tiny(command: list[str]) -> list[str]:
    """``command`` at the tiny size: what trains gets TINY (-j N dropped: workers have tests of their own)."""
    words = list(command)
    if "-j" in words:
        at = words.index("-j")
        del words[at:at + 2]
    return words + TINY if words[0] in ("run", "experiment") else words


def walk(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
         skip: Callable[[list[str]], bool] = lambda command: False) -> list[str]:
    """Write the page's files and run its commands (but those ``skip`` says) in a copy of configs/, in order;
    their outputs."""
    text = (PAGES / page).read_text(encoding="utf-8")
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    monkeypatch.chdir(tmp_path)
    for name, body in files(text).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(body)
    outputs = []
    for command in readme_commands(text):
        if command[:1] == ["--help"] or skip(command):
            continue
        status = main(tiny(command))
        out = capsys.readouterr()
        assert status == 0, f"{page}: fedaccel {' '.join(command)} exited {status}: {out.err[-2000:]}"
        outputs.append(out.out + out.err)
    return outputs


@pytest.mark.parametrize("page", MINE)
def test_every_command_of_a_tutorial_parses(page: str) -> None:
    commands = readme_commands((PAGES / page).read_text(encoding="utf-8"))
    assert len(commands) >= 2
    parser = build_parser()
    for command in commands:
        if command == ["--help"]:
            continue
        try:
            parser.parse_args(command)
        except SystemExit:
            pytest.fail(f"{page}: command does not parse: fedaccel {' '.join(command)}")


def test_first_run_at_a_tiny_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    outputs = walk("first-run.md", tmp_path, monkeypatch, capsys)
    assert (tmp_path / "runs/first/fedavg/metrics.jsonl").is_file()
    from fedaccel.report.reading import load_run

    assert load_run(tmp_path / "runs/first/bherd").label == "bherd alpha=0.5"  # step 3: the name the page gives it
    table = outputs[2]
    assert "| fedavg (baseline) |" in table and "| bherd alpha=0.5 |" in table
    assert (tmp_path / "first.png").read_bytes()[:4] == b"\x89PNG"


def test_your_claim_at_a_tiny_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    outputs = walk("your-claim.md", tmp_path, monkeypatch, capsys)
    folder = tmp_path / "runs/my_claim"
    assert len([p for p in folder.iterdir() if p.is_dir()]) == 12
    claims = json.loads((folder / "claims.json").read_text())
    assert [c["text"] for c in claims] == ["FedProx ends where FedAvg ends"]
    assert claims[0]["verdict"] in ("agrees", "disagrees", "inconclusive")
    assert "FedProx ends where FedAvg ends" in outputs[1] and "fedprox mu=0.01" in outputs[1]
    assert "seeds" in outputs[2]  # the plan


def test_two_hosts_prepares_its_run_folder_at_a_tiny_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys) -> None:
    """Steps 2 and 3 (step 1 and step 5 need a deployment: minutes of processes, see the module docstring)."""
    outputs = walk("two-hosts.md", tmp_path, monkeypatch, capsys,
                   skip=lambda command: command[0] == "compare" or command[0] == "deploy" and "--prepare" not in command)
    assert (tmp_path / "tls/node1_key").is_file() and (tmp_path / "runs/two-hosts/config.yaml").is_file()
    printed = outputs[-1]
    text = (PAGES / "two-hosts.md").read_text(encoding="utf-8")
    for where in ("server host", "server host, <i> = 0..1", "client host <i>", "then, on the server host"):
        shown = where.replace("<", "&lt;").replace(">", "&gt;")  # Markdown would take <i> for a tag
        assert f"\n{where}" in "\n" + printed and f"**{shown}" in text, where  # the page names what is printed
    assert "python -m fedaccel.flower.link" in printed and "flwr supernode register" in printed
    # a local deploy --resume of the prepared folder ran it on this host without TLS (a new user's), and --prepare
    # again advised `fedaccel run --resume`, which is refused: each now points at the server host's flwr run
    server_line = next(line for line in printed.splitlines() if line.startswith("then, on the server host:"))
    command = server_line.partition(":  ")[2]
    for argv in (["deploy", "--resume", "runs/two-hosts"],
                 ["deploy", "--prepare", "--tls", "tls", "--out", "runs/two-hosts", "--set", "data.clients=2"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: runs/two-hosts ") and command in err and err.count("\n") == 1, err
    assert not (tmp_path / "runs/two-hosts/metrics.jsonl").exists()
