"""Files and folders from others (issue 29, items 2, 4 and the downloads of 5): no write follows a
link planted where fedaccel writes, folders that are not fedaccel's are left alone, and a download
stops at its file's size. Every refusal is one line, and nothing outside the folder changes."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import tempfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import BytesIO
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedaccel.cli import main
from fedaccel.data import download
from fedaccel.data.download import RemoteFile, Source
from fedaccel.disk import LinkRefused, open_no_link, temp_name, write_atomic
from fedaccel.errors import DataError
from fedaccel.grids.experiment import GRID_FILES
from fedaccel.launch import run
from fedaccel.runs.config import load_config
from fedaccel.runs.folder import CHECKPOINT, PREVIOUS_CHECKPOINT, RUN_FILES

TINY = ["data.dataset=digits", "model=softmax", "data.split=case2", "data.clients=3", "train.rounds=4",
        "train.lr=0.1", "train.batch_size=20", "eval.every=1", "run.checkpoint_every=2", "run.progress=false"]
VICTIM = b"the user's own notes\n"
SLOW = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def tree(folder: Path) -> dict[str, tuple[str, bytes | str, int]]:
    """Every entry under ``folder`` (links not followed): its kind, its bytes or link target, its mode."""
    found = {}
    for path in sorted(folder.rglob("*")):
        info = path.lstat()
        if path.is_symlink():
            found[str(path.relative_to(folder))] = ("link", os.readlink(path), 0)
        elif path.is_file():
            found[str(path.relative_to(folder))] = ("file", path.read_bytes(), stat.S_IMODE(info.st_mode))
        else:
            found[str(path.relative_to(folder))] = ("dir", "", stat.S_IMODE(info.st_mode))
    return found


def home_of(root: Path) -> Path:
    """A user's folder beside the folder under attack: a file worth keeping, a folder, nothing else."""
    home = root / "home"
    (home / "photos").mkdir(parents=True)
    (home / "notes.txt").write_bytes(VICTIM)
    (home / "notes.txt").chmod(0o640)
    return home


def plant(at: Path, home: Path, points: str) -> None:
    """A symbolic link at ``at`` to the user's file, to a name not there yet, or to a folder of theirs."""
    target = {"file": home / "notes.txt", "dangling": home / "new.txt", "folder": home / "photos"}[points]
    at.unlink(missing_ok=True)
    at.symlink_to(target)


def one_line(capsys: pytest.CaptureFixture) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


# ------------------------------------------------------------------------- the helper itself

NAMES = st.text(st.characters(whitelist_categories=("L", "N"), whitelist_characters="._-"), min_size=1, max_size=20
                ).filter(lambda n: n not in (".", ".."))


@settings(max_examples=60, deadline=None)
@given(name=NAMES, at=st.sampled_from(["target", "temp", "previous"]),
       points=st.sampled_from(["file", "dangling", "folder"]), data=st.binary(max_size=64))
def test_write_atomic_refuses_a_link_at_any_name_it_writes(name: str, at: str, points: str, data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home, folder = home_of(Path(tmp)), Path(tmp) / "run"
        folder.mkdir()
        path, previous = folder / name, folder / f"{name}.prev"
        plant({"target": path, "temp": temp_name(path), "previous": previous}[at], home, points)
        before = tree(home)
        with pytest.raises(LinkRefused, match="symbolic link") as refused:
            write_atomic(path, data, previous=previous)
        assert "\n" not in str(refused.value)
        assert tree(home) == before


@settings(max_examples=30, deadline=None)
@given(name=NAMES, data=st.binary(max_size=64), leftover=st.booleans())
def test_write_atomic_writes_a_plain_file_and_leaves_no_temporary_one(name: str, data: bytes, leftover: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        if leftover:  # what a write killed before its rename left
            temp_name(path).write_bytes(b"half")
        write_atomic(path, data)
        assert path.read_bytes() == data and not path.is_symlink()
        assert sorted(p.name for p in Path(tmp).iterdir()) == [name]


def test_appends_refuse_a_link_and_anything_but_a_plain_file(tmp_path: Path) -> None:
    home = home_of(tmp_path)
    (tmp_path / "metrics.jsonl").symlink_to(home / "notes.txt")
    with pytest.raises(LinkRefused, match="symbolic link"):
        open_no_link(tmp_path / "metrics.jsonl")
    os.mkfifo(tmp_path / "diagnostics.jsonl")  # opened for writing, a FIFO would wait for a reader for ever
    with pytest.raises(LinkRefused, match="not a plain file"):
        open_no_link(tmp_path / "diagnostics.jsonl")
    assert (home / "notes.txt").read_bytes() == VICTIM
    with open_no_link(tmp_path / "new.jsonl") as file:
        file.write("{}\n")
    assert (tmp_path / "new.jsonl").read_text() == "{}\n"


def test_private_keys_are_created_owner_only_whatever_the_umask(tmp_path: Path) -> None:
    pytest.importorskip("cryptography")
    old = os.umask(0)
    try:
        assert main(["certs", str(tmp_path / "tls"), "--clients", "1"]) == 0
    finally:
        os.umask(old)
    for key in ("ca.key", "server.key", "node0_key"):
        assert stat.S_IMODE((tmp_path / "tls" / key).stat().st_mode) == 0o600, key


# ------------------------------------------------------------------------- each command, each file

@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run(load_config(None, TINY), tmp_path_factory.mktemp("made") / "run")


def interrupted_copy(finished: Path, root: Path) -> Path:
    """``finished`` as if killed after round 3 was logged: its newest checkpoint is round 2's."""
    path = root / "run"
    shutil.copytree(finished, path)
    for name in ("summary.json", "model.pt"):
        (path / name).unlink()
    os.replace(path / PREVIOUS_CHECKPOINT, path / CHECKPOINT)
    return path


RUN_NAMES = [*RUN_FILES, *(temp_name(Path(name)).name for name in RUN_FILES)]


@SLOW
@given(planted=st.lists(st.tuples(st.sampled_from(RUN_NAMES), st.sampled_from(["file", "dangling", "folder"])),
                        min_size=1, max_size=3, unique_by=lambda p: p[0]))
def test_resume_refuses_a_run_folder_with_links_where_it_writes(
        finished_run: Path, planted: list[tuple[str, str]], capsys: pytest.CaptureFixture) -> None:
    """`ln -s ~/notes.txt RUN/.metrics.jsonl.tmp; fedaccel run --resume RUN` wrote the metrics into
    notes.txt: now any link at a name a run writes is refused in one line, and nothing changes."""
    with tempfile.TemporaryDirectory() as tmp:
        home, path = home_of(Path(tmp)), interrupted_copy(finished_run, Path(tmp))
        for name, points in planted:
            plant(path / name, home, points)
        before_home, before_run = tree(home), tree(path)
        capsys.readouterr()
        assert main(["run", "--resume", str(path), "--no-progress"]) == 2
        assert "is a symbolic link; fedaccel writes nothing through a link" in one_line(capsys)
        assert tree(home) == before_home and tree(path) == before_run  # refused before anything was read


@SLOW
@given(name=st.sampled_from([*GRID_FILES, *(temp_name(Path(n)).name for n in GRID_FILES)]),
       points=st.sampled_from(["file", "dangling"]))
def test_experiment_refuses_links_in_its_grid_folder_before_any_cell_runs(
        finished_run: Path, name: str, points: str, capsys: pytest.CaptureFixture) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home, grid = home_of(Path(tmp)), Path(tmp) / "grid"
        experiment = write_experiment(Path(tmp), grid, seeds=[0, 1])
        shutil.copytree(finished_run, grid / "run.seed=0")  # a grid of fedaccel's, its second cell to run
        plant(grid / name, home, points)
        before = tree(home)
        capsys.readouterr()
        assert main(["experiment", str(experiment), "--no-progress"]) == 2
        assert "symbolic link" in one_line(capsys)
        assert tree(home) == before and not (grid / "run.seed=1").exists()


def write_experiment(root: Path, out_dir: Path, seeds: list[int]) -> Path:
    base = {key: yaml.safe_load(value) for key, _, value in (item.partition("=") for item in TINY)}
    nested: dict = {}
    for dotted, value in base.items():
        *parents, last = dotted.split(".")
        node = nested
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    path = root / "exp.yaml"
    path.write_text(yaml.safe_dump({"name": "hostile", "out_dir": str(out_dir), "base": nested,
                                    "grid": {"run.seed": seeds}}))
    return path


@pytest.mark.parametrize("name", ["claims.json", ".claims.json.tmp"])
def test_judge_refuses_a_link_where_it_writes_claims(tmp_path: Path, name: str, capsys: pytest.CaptureFixture) -> None:
    from test_judge import CLAIMS, write_grid

    home, grid = home_of(tmp_path), write_grid(tmp_path / "toy", CLAIMS[:1])
    plant(grid / name, home, "file")
    before = tree(home)
    capsys.readouterr()
    assert main(["judge", str(grid)]) == 2
    assert "symbolic link" in one_line(capsys)
    assert tree(home) == before


@pytest.mark.parametrize("name", ["ca.key", "server.key", "node0_key", "node1_key.pub", "ca.crt", ".server.key.tmp"])
def test_certs_force_refuses_a_link_before_writing_any_key(tmp_path: Path, name: str,
                                                           capsys: pytest.CaptureFixture) -> None:
    """`certs --force` wrote a private key through a planted link and chmod-ed its target."""
    pytest.importorskip("cryptography")
    home, folder = home_of(tmp_path), tmp_path / "tls"
    folder.mkdir()
    plant(folder / name, home, "file")
    before, before_folder = tree(home), tree(folder)
    capsys.readouterr()
    assert main(["certs", str(folder), "--clients", "2", "--force"]) == 2
    assert "symbolic link" in one_line(capsys)
    assert tree(home) == before and tree(folder) == before_folder  # not one key written


@pytest.mark.parametrize("name", ["curves.png", ".curves.png.tmp"])
def test_plot_refuses_a_link_where_it_draws(finished_run: Path, tmp_path: Path, name: str,
                                            capsys: pytest.CaptureFixture) -> None:
    home = home_of(tmp_path)
    (home / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"a photo")  # a PNG: the old check let it be redrawn
    (tmp_path / name).symlink_to(home / "photo.png")
    before = tree(home)
    capsys.readouterr()
    assert main(["plot", str(finished_run), "-o", str(tmp_path / "curves.png")]) == 2
    assert "symbolic link" in one_line(capsys)
    assert tree(home) == before


# ------------------------------------------------------------------------- folders that are not ours

FOREIGN_EVENTS = "events.out.tfevents.1700000000.elsewhere.42.0"


def test_tensorboard_keeps_another_tools_event_files(finished_run: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "run"
    shutil.copytree(finished_run, path)
    (path / FOREIGN_EVENTS).write_bytes(b"another tool's events")
    for _ in range(2):  # the second time replaces fedaccel's own file, and only it
        assert main(["tensorboard", str(path)]) == 0
        own = sorted(p.name for p in path.glob("events.out.tfevents.*") if p.name != FOREIGN_EVENTS)
        assert len(own) == 1 and json.loads((path / "tensorboard.json").read_text()) == own
    assert (path / FOREIGN_EVENTS).read_bytes() == b"another tool's events"


@pytest.mark.parametrize("rows", [
    '{"step": 1, "loss": 0.5}\n{"step": 2, "loss": 0.4}\n',  # another tool's metrics: no round (was KeyError)
    '{"round": "1"}\n{"round": 2}\n',
    '[1, 2]\n{"round": 2}\n',
    '{"round": 1, "x": ' + "[" * 100_000 + "]" * 100_000 + '}\n{"round": 2}\n',
    '{"round": 1, "x": 1' + "0" * 400 + '}\n{"round": 2}\n',  # past a float
])
def test_tensorboard_on_a_folder_without_fedaccel_rows_is_one_line_and_deletes_nothing(
        tmp_path: Path, rows: str, capsys: pytest.CaptureFixture) -> None:
    folder = tmp_path / "theirs"
    folder.mkdir()
    (folder / "config.yaml").write_text("lr: 0.1\n")
    (folder / "metrics.jsonl").write_text(rows)
    (folder / FOREIGN_EVENTS).write_bytes(b"another tool's events")
    before = tree(folder)
    assert main(["tensorboard", str(folder)]) == 2
    assert f"{folder / 'metrics.jsonl'}:1: " in one_line(capsys)  # the file and line, in one line
    assert tree(folder) == before


def test_tensorboard_leaves_a_folder_of_only_foreign_files_alone(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "metrics.jsonl").write_text('{"round": 1}\n')  # no config.yaml: not a fedaccel run
    (tmp_path / FOREIGN_EVENTS).write_bytes(b"x")
    before = tree(tmp_path)
    assert main(["tensorboard", str(tmp_path)]) == 2
    assert "no fedaccel run under" in one_line(capsys)
    assert tree(tmp_path) == before


def test_experiment_into_a_folder_of_the_users_files_is_refused_before_any_cell_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """`out_dir` naming a user's folder replaced their table.md and experiment.yaml without a word."""
    mine = tmp_path / "mine"
    mine.mkdir()
    for name, text in (("table.md", "| my | table |\n"), ("experiment.yaml", "my: notes\n"), ("notes.txt", "x")):
        (mine / name).write_text(text)
    experiment = write_experiment(tmp_path, mine, seeds=[0])
    before = tree(mine)
    assert main(["experiment", str(experiment), "--no-progress"]) == 2
    line = one_line(capsys)
    assert f"{mine} holds" in line and "no cell ran" in line
    assert tree(mine) == before


def test_experiment_goes_on_in_its_own_grid_folder(finished_run: Path, tmp_path: Path) -> None:
    """Its own: one stopped before its first cell (only its copy), or one holding a run folder."""
    grid = tmp_path / "grid"
    experiment = write_experiment(tmp_path, grid, seeds=[0])
    grid.mkdir()
    (grid / "experiment.yaml").write_bytes(experiment.read_bytes())
    shutil.copytree(finished_run, grid / "run.seed=0")
    (grid / "notes.txt").write_text("the user's, beside a grid of fedaccel's")
    assert main(["experiment", str(experiment), "--no-progress"]) == 0
    assert (grid / "table.md").is_file() and (grid / "notes.txt").read_text().startswith("the user's")


# ------------------------------------------------------------------------- downloads

class Endless:
    """A response body that never ends."""

    def read(self, n: int) -> bytes:
        return b"x" * n


def test_a_copy_stops_at_the_limit_with_nothing_past_it_written() -> None:
    out = BytesIO()
    out.fileno = lambda: os.open(os.devnull, os.O_WRONLY)  # type: ignore[method-assign]
    with pytest.raises(download._TooLong):
        download._copy(Endless(), out, 0, None, 3 * download.CHUNK + 5, download._Progress("", False))
    assert len(out.getvalue()) <= 3 * download.CHUNK + 5


@pytest.fixture
def endless_server() -> Iterator[tuple[str, dict[str, int]]]:
    """Serves ``/data/x.gz`` as a chunked body that never ends (or, with ``announce``, a Content-Length)."""
    state = {"sent": 0, "announce": 0}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self.send_response(200)
            if state["announce"]:
                self.send_header("Content-Length", str(state["announce"]))
            else:
                self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                while state["sent"] < 1 << 30:  # a bound for the test server only
                    block = b"y" * 65536
                    self.wfile.write(block if state["announce"] else b"%x\r\n%s\r\n" % (len(block), block))
                    state["sent"] += len(block)
            except OSError:
                pass  # the client hung up: what it should do

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/", state
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize("size,announce", [(200_000, 0), (None, 0), (200_000, 10**12)])
def test_a_download_stops_at_its_size(endless_server: tuple[str, dict[str, int]], tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch, size: int | None, announce: int) -> None:
    """A mirror streaming without end filled the disk: now the file stops at its published size
    (without one: at UNKNOWN_SIZE_LIMIT), and a length announced above the size is refused unread."""
    url, state = endless_server
    state["announce"] = announce
    monkeypatch.setattr(download, "UNKNOWN_SIZE_LIMIT", 300_000)
    source = Source((RemoteFile("x.gz", "0" * 32, size),), (url + "data/",))
    with pytest.raises(DataError, match=f"sends more than the {size or 300_000:,} bytes x.gz has") as refused:
        download.download_dataset("data", tmp_path / "data", source=source, mirrors=(url + "data/",), progress=False)
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "data").exists()  # the .part removed, the new folder with it
    assert state["sent"] < (10 << 20)  # the client hung up long before the test server's bound


def test_the_disk_full_line_names_the_data_folders_free_space(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture) -> None:
    asked: list[Path] = []
    real_usage = shutil.disk_usage

    def usage(path: Path) -> object:
        asked.append(Path(path))
        return real_usage(path)

    def full(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")  # a write: no file name, as os.write says it

    class Opened:
        status, headers = 200, {"Content-Length": "10"}

        def __enter__(self) -> Opened:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

    monkeypatch.setattr(download, "_copy", full)
    monkeypatch.setattr(download.urllib.request, "urlopen", lambda *a, **k: Opened())
    monkeypatch.setattr(shutil, "disk_usage", usage)
    folder = tmp_path / "data"
    assert main(["data", "get", "mnist", "--to", str(folder), "-q"]) == 1
    line = one_line(capsys)
    assert f"writing {folder / 'train-images-idx3-ubyte.gz.part'} failed" in line and "MB free there" in line
    assert asked == [folder]


@pytest.mark.parametrize("kind", ["fifo", "folder", "socket", "device", "link", "link to a fifo"])
def test_open_regular_refuses_anything_but_a_plain_file_in_one_line_without_blocking(tmp_path: Path, kind: str) -> None:
    """Issue 47, item 2: the one opener of files fedaccel reads takes plain files only, and a FIFO never blocks it."""
    import socket

    from fedaccel.disk import NotAFile, open_regular, read_regular

    path = tmp_path / "summary.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "socket":
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
    elif kind == "device":
        path = Path(os.devnull)
    elif kind == "link":
        (tmp_path / "notes.txt").write_text("{}")
        path.symlink_to(tmp_path / "notes.txt")
    else:
        os.mkfifo(tmp_path / "pipe")
        path.symlink_to(tmp_path / "pipe")
    with pytest.raises(NotAFile) as refused:
        open_regular(path, follow=kind == "link to a fifo")
    assert str(path) in str(refused.value) and "\n" not in str(refused.value)
    if kind == "link":
        assert read_regular(path, follow=True) == b"{}"  # a user's own config may be a link: followed when asked
    (tmp_path / "plain").write_bytes(b"data")
    assert read_regular(tmp_path / "plain") == b"data"
