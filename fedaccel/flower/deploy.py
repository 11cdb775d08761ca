"""``fedaccel deploy``: a SuperLink and one SuperNode per client on this host, then the run.

Every piece is a real Flower process (``flower-superlink``, ``flower-supernode``, ``flwr run``);
the run folder is the in-process runtime's. Their logs go to ``RUN_DIR/flower/``. The
ServerApp's round lines in ``flwr run``'s stream drive the same progress bar as ``fedaccel run``.
Ctrl-C or SIGTERM: the run finishes its round, checkpoints it and stops (a second one stops at
once); every process started here is stopped when the run ends, fails or is interrupted, and
dies with ``fedaccel deploy`` if that is killed (:mod:`fedaccel.runs.lifetime`), Flower's own
children (SuperExec, ServerApp, ClientApps) included. The ServerApp holds the run folder's lock
while it writes; ``fedaccel deploy`` holds ``RUN_DIR/flower/.lock`` (one deployment per folder).

Only the deploying user drives the deployment: the SuperLink is fedaccel's
(:mod:`fedaccel.flower.link`), whose Control API takes only the deployment's token, from this
host, and the ServerApp serves only the run whose run config holds the deployment's run token
(:mod:`fedaccel.flower.security`, docs/threat-model.md).

On several hosts, start the same pieces by hand (see docs/flower.md): :func:`prepare` makes the
run folder, its secrets and the app (``fedaccel deploy --prepare --tls DIR``), then the
SuperLink on one host, ``python -m fedaccel.flower.node --superlink HOST:PORT --node-config
"partition-id=<i> num-partitions=N"`` on each client host (with fedaccel installed and the data
where the config says), then ``flwr run RUN_DIR/flower/app ...``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from fedaccel.disk import open_no_link, write_atomic
from fedaccel.errors import UserError
from fedaccel.flower import ENV, ROUND_LINE, SERVER_PREFIX, STOP_FILE
from fedaccel.runs.config import Config, dump_config
from fedaccel.runs.lifetime import launched, wrapper
from fedaccel.runs.lock import lock_run_dir
from fedaccel.runs.stopping import Interrupted

APP_TOML = """[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "fedaccel-app"
version = "1.0.0"
description = "fedaccel's ServerApp and ClientApp (fedaccel must be installed on every node)"
dependencies = []

[tool.flwr.app]
publisher = "fedaccel"

[tool.flwr.app.components]
serverapp = "fedaccel_app:server_app"
clientapp = "fedaccel_app:client_app"

[tool.flwr.app.config]
run-dir = ""
run-token = ""
connect-timeout = 0
"""


def free_port(taken: set[int] | None = None) -> int:
    """A port free on 127.0.0.1 now and not in ``taken`` (ports handed to processes that may not
    have bound them yet: the kernel can offer one of them again), added to ``taken``."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if taken is None:
            return port
        if port not in taken:
            taken.add(port)
            return port


def write_app(folder: Path) -> Path:
    """The Flower App folder ``flwr run`` packages: a pyproject and a one-line module."""
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(folder / "pyproject.toml", APP_TOML)
    write_atomic(folder / "fedaccel_app.py",
        '"""fedaccel\'s Flower App components."""\nfrom fedaccel.flower.apps import client_app, server_app\n\n'
        '__all__ = ["client_app", "server_app"]\n')
    return folder


def _tool(name: str) -> str:
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    if not found:
        raise UserError(f"{name} not found: install the Flower extra (pip install 'fedaccel[flower]')")
    return found


FLOWER_CHILDREN = ("flower-superexec", "flwr-serverapp", "flwr-clientapp")  # what Flower starts by name


def die_with_parents(folder: Path) -> str:
    """A folder for the front of ``PATH`` with a wrapper for each program that Flower starts by
    name (:data:`FLOWER_CHILDREN`): each then dies with the Flower process that started it."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in FLOWER_CHILDREN:
        script = folder / name
        write_atomic(script, wrapper(_tool(name)), mode=0o755)
    return str(folder)


class Processes:
    """Started processes, stopped in reverse order (TERM, then KILL after a grace period): the
    later ones (SuperNodes, the run) first, so that they can still say goodbye to the first
    one (the SuperLink), which goes last. Each dies with this process (with the thread that
    started it), whatever ends it."""

    def __init__(self, logs: Path, env: dict[str, str]) -> None:
        self.logs, self.env, self.started = logs, env, []

    def start(self, name: str, args: list[str], cwd: Path | None = None) -> subprocess.Popen:
        log = open_no_link(self.logs / f"{name}.log", "w")
        process = subprocess.Popen(launched(args), stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=cwd,
                                   start_new_session=True)
        self.started.append((name, process, log))
        return process

    def stop(self, grace: float = 5.0) -> None:
        # Flower starts detached children of its own (superexec, serverapp, clientapps): find them
        # first, then stop everything.
        children = descendants({process.pid for _, process, _ in self.started})
        self._stop(self.started[1:], [], grace)
        self._stop(self.started[:1], children, grace)

    @staticmethod
    def _stop(started: list[tuple[str, subprocess.Popen, Any]], children: list[int], grace: float) -> None:
        for _, process, _ in reversed(started):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        _signal(children, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for _, process, log in reversed(started):
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            log.close()
        while children and time.monotonic() < deadline:
            children = [pid for pid in children if _alive(pid)]
            time.sleep(0.1)
        _signal(children, signal.SIGKILL)


def descendants(roots: set[int]) -> list[int]:
    """Every live process below ``roots`` (from /proc's parent links)."""
    parent: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parent[int(stat.parent.name)] = int(fields[1])
        except (OSError, IndexError, ValueError):
            continue
    found, frontier = [], set(roots)
    while frontier:
        frontier = {pid for pid, ppid in parent.items() if ppid in frontier}
        found.extend(sorted(frontier))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def register(env: dict[str, str], public_key: Path, connection: str = "local", attempts: int = 30) -> None:
    """``flwr supernode register``: the SuperLink will accept the SuperNode holding this key."""
    for _ in range(attempts):  # the SuperLink's Control API may need a moment after its port opens
        done = subprocess.run([_tool("flwr"), "supernode", "register", str(public_key), connection],
                              env=env, capture_output=True, text=True, timeout=60)
        if done.returncode == 0:
            return
        time.sleep(1.0)
    raise UserError(f"could not register {public_key}: {(done.stdout + done.stderr).strip()[-300:]}")


def wait_for_port(port: int, process: subprocess.Popen, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise UserError(f"{what} exited with status {process.returncode}; see its log")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise UserError(f"{what} did not listen on port {port} within {timeout:g} s")


def watch(runner: subprocess.Popen, procs: Processes, timeout: float, stream: Stream, stop: Interrupts,
          grace: float, finished: Any = None) -> None:
    """Wait for ``runner`` (``flwr run``) to end, following its ``stream``. Fail early, with the
    log's last lines, if the SuperLink or every SuperNode has exited; a SuperNode that exits
    alone is a lost client (the run goes on without it), said once. Once ``stop`` is asked,
    write its stop file and give the run ``grace`` s to finish its round. Once ``finished()`` (the
    run wrote its summary) and the stream showed the last round (or :data:`LAST_LINE_S` later), return
    without waiting for Flower's own ending (about 3 s: the ServerApp's log flush, the stream's polls)."""
    deadline = time.monotonic() + timeout
    told: set[str] = set()
    stopping, ended_at = False, None
    while runner.poll() is None:
        stream.follow()
        stream.heartbeat()
        if ended_at is None and finished is not None and finished():
            ended_at = time.monotonic()
        if ended_at is not None and (stream.last_round >= stream.rounds or time.monotonic() - ended_at > LAST_LINE_S):
            stream.follow()
            return
        if stop.asked.is_set() and not stopping:
            stop.file.touch()  # the ServerApp takes it (fedaccel.flower.server.serve)
            stream.say("fedaccel deploy: stopping after the current round (Ctrl-C again: at once)")
            deadline, stopping = min(deadline, time.monotonic() + grace), True
        if time.monotonic() > deadline:
            if stopping:
                raise KeyboardInterrupt  # the round did not end in time: stop at once
            raise UserError(f"the deployed run did not finish within {timeout:g} s")
        ended = {name: process.returncode for name, process, _ in procs.started if process.poll() is not None}
        nodes = [name for name, _, _ in procs.started if name.startswith("supernode")]
        if "superlink" in ended or (nodes and all(name in ended for name in nodes)):
            name = "superlink" if "superlink" in ended else nodes[0]
            raise UserError(f"{name} exited with status {ended[name]} before the run ended; the end of "
                            f"{procs.logs / (name + '.log')}:\n{tail(procs.logs / (name + '.log'))}")
        for name in sorted(set(ended) & set(nodes) - told):
            stream.say(f"fedaccel deploy: {name} exited with status {ended[name]}; the run goes on without it")
            told.add(name)
        time.sleep(0.2)
    stream.follow()


HEARTBEAT_S = 5.0  # the longest silence while a deployment starts
LAST_LINE_S = 2.0  # how long a finished run's last round line may take to reach the stream (logs every 0.2 s,
#                    the stream's polls every 0.5 s)


class Stream:
    """``flwr run --stream``'s output as it grows (its log file): the ServerApp's round lines
    move a progress bar (:func:`fedaccel.runs.loop.progress_bar`, as ``fedaccel run`` shows), its
    ``error: ...`` line is kept for the one-line error, and its other lines are shown."""

    def __init__(self, log: Path, bar: Any, *, quiet: bool = False, rounds: int = 0) -> None:
        self.log, self.bar, self.quiet, self.rounds = log, bar, quiet, rounds
        self.position, self.error, self.rounds_seen, self.last_round = 0, "", False, 0
        self.began = self.said = time.monotonic()
        self.waited = False  # said once why it waits

    def heartbeat(self) -> None:
        """Before the first round, a line when nothing was said for :data:`HEARTBEAT_S` seconds: the
        processes, the data and round 0's evaluation take a while (none with ``quiet``)."""
        now = time.monotonic()
        if not self.quiet and not self.rounds_seen and now - self.said >= HEARTBEAT_S:
            why = "" if self.waited else (f"; the ServerApp and the ClientApps load the model and the data; logs in "
                                          f"{self.log.parent}")
            self.say(f"fedaccel deploy: {'still ' if self.waited else ''}waiting for the first round "
                     f"({now - self.began:.0f} s{why})")
            self.waited = True

    def follow(self) -> None:
        try:
            with open(self.log, "rb") as file:
                file.seek(self.position)
                data = file.read()
        except OSError:
            return
        complete = data[:data.rfind(b"\n") + 1]
        self.position += len(complete)
        for line in complete.decode(errors="replace").splitlines():
            self._line(line)

    def _line(self, line: str) -> None:
        found = ROUND_LINE.match(line)
        if found:
            self.last_round = int(found.group(1))
            if not self.rounds_seen:  # the bar's clock: rounds only, not the processes' start (as in process)
                done = self.bar.n
                self.bar.reset()
                self.bar.n, self.rounds_seen = done, True
            self.said = time.monotonic()
            if found.group(3):
                self.bar.set_postfix(acc=found.group(3), refresh=False)
            self.bar.update(int(found.group(1)) - self.bar.n)
        elif line.startswith(SERVER_PREFIX):
            text = line[len(SERVER_PREFIX):]
            if text.startswith("error: "):
                self.error = text[len("error: "):]
            elif not text.startswith(("interrupted at round", "stop asked")):  # deploy says these its way
                self.say(line)

    def say(self, text: str) -> None:
        self.said = time.monotonic()
        self.bar.write(text, file=sys.stderr)


class Interrupts:
    """SIGINT and SIGTERM while deploying. Once the run is under way (``graceful``), the first
    one asks it to stop after its round (``asked``; :func:`watch` then writes ``file``, the
    run's stop file); any later one, or one before, stops at once (KeyboardInterrupt); while
    the processes are being stopped (``stopping``) they wait."""

    def __init__(self, file: Path) -> None:
        self.file = file
        self.asked = threading.Event()
        self.reason = "a stop request"  # the signal that asked, for the user's message
        self.graceful = self.stopping = False
        self.previous: dict[int, Any] = {}

    def __call__(self, signum: int, frame: Any) -> None:
        if self.stopping:
            return
        if self.graceful and not self.asked.is_set():
            self.reason = signal.Signals(signum).name
            self.asked.set()
            return
        self.reason = "a second signal" if self.asked.is_set() else signal.Signals(signum).name
        raise KeyboardInterrupt

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():  # elsewhere signals are left alone
            self.previous = {sig: signal.signal(sig, self) for sig in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def tail(log: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def summary_stamp(run_dir: Path) -> tuple[int, int] | None:
    """``summary.json``'s (inode, mtime) in ``run_dir``, None without one: a summary written since (atomically, so a
    new file) has another."""
    try:
        stat = (run_dir / "summary.json").stat()
    except OSError:
        return None
    return stat.st_ino, stat.st_mtime_ns


def finished_since(run_dir: Path, before: tuple[int, int] | None) -> bool:
    """Whether the run in ``run_dir`` wrote a summary of a finished run since its :func:`summary_stamp` was
    ``before``: its ServerApp's last write (a summary from before, e.g. of a run resumed once finished, does not
    count)."""
    from fedaccel.runs.rows import read_json

    stamp = summary_stamp(run_dir)
    if stamp is None or stamp == before:
        return False
    try:
        summary = read_json(run_dir / "summary.json")
    except UserError:  # replaced or damaged meanwhile
        return False
    return isinstance(summary, dict) and summary.get("finished") is True


def checkpoint_round(run_dir: Path) -> int:
    """The round ``--resume`` continues from: the newest checkpoint that loads, 0 without one."""
    from fedaccel.runs.checkpoint import load_checkpoint

    saved = load_checkpoint(run_dir)
    return int(saved["state"].round) if saved is not None else 0


def prepare(config: Config, run_dir: Path, *, clients: int | None = None, resume: bool = False) -> Path:
    """Make ``run_dir`` ready for a deployed run: its ``config.yaml`` (unless resumed), the
    deployment's secrets (``RUN_DIR/flower/secrets``) and the Flower App folder
    ``RUN_DIR/flower/app`` for ``flwr run``; returns the app folder."""
    n = config.data.clients if clients is None else clients
    if n != config.data.clients:
        raise UserError(f"--clients {n} but data.clients = {config.data.clients} (one SuperNode per client)")
    if resume and not (run_dir / "config.yaml").is_file():
        raise UserError(f"{run_dir} is not a run folder (no config.yaml)")
    if not resume and (run_dir / "metrics.jsonl").exists():
        raise UserError(f"{run_dir} already holds a run; give another --out, or --resume it")
    (run_dir / "flower").mkdir(parents=True, exist_ok=True)
    if not resume:
        dump_config(config, run_dir / "config.yaml")
    (run_dir / STOP_FILE).unlink(missing_ok=True)  # a stop asked of a run that is over
    from fedaccel.flower.security import write_secrets

    write_secrets(run_dir / "flower", run_dir)  # fresh each time: what was written before is void
    return write_app(run_dir / "flower" / "app")


def write_flwr_home(home: Path, address: str, root_certificates: Path | None) -> None:
    """``home``: the ``FLWR_HOME`` of this deployment's ``flwr`` commands, holding its Control token."""
    from fedaccel.flower.security import CONTROL_TOKEN, SECRETS, read_secret
    from fedaccel.flower.security import write_flwr_home as write

    write(home, address, read_secret(home.parent / SECRETS / CONTROL_TOKEN), root_certificates)


def start_processes(
    procs: Processes, app: Path, run_dir: Path, n: int, link_port: int, *, tls: Path | None, stock: bool,
    say: Any = None,
) -> subprocess.Popen:
    """The SuperLink, ``n`` SuperNodes and ``flwr run`` of ``app`` on ``run_dir`` (returned); ``say(line)``
    tells each step as it is done."""
    began, say = time.monotonic(), say or (lambda line: None)
    from fedaccel.flower.security import RUN_CONFIG, SECRETS

    env = procs.env
    flower = run_dir / "flower"
    link_security = ["--insecure"] if tls is None else [
        "--ssl-ca-certfile", str(tls / "ca.crt"), "--ssl-certfile", str(tls / "server.pem"),
        "--ssl-keyfile", str(tls / "server.key"), "--enable-supernode-auth"]
    secrets = flower / SECRETS
    link = procs.start("superlink", [sys.executable, "-m", "fedaccel.flower.link", "--secrets", str(secrets),
                                     *link_security, "--host", "127.0.0.1", "--port", str(link_port)], cwd=flower)
    wait_for_port(link_port, link, "the SuperLink")
    say(f"fedaccel deploy: SuperLink listening on 127.0.0.1:{link_port} ({time.monotonic() - began:.0f} s)")
    taken = {link_port}  # each SuperNode's port distinct: two once got the same one before either bound it
    for i in range(n if tls else 0):
        register(env, tls / f"node{i}_key.pub")  # type: ignore[operator]
    for i in range(n):
        node_env_home = flower / f"node{i}"
        node_env_home.mkdir(exist_ok=True)
        procs.env = {**env, "FLWR_HOME": str(node_env_home)}
        node_security = ["--insecure"] if tls is None else [
            "--root-certificates", str(tls / "ca.crt"), "--auth-supernode-private-key", str(tls / f"node{i}_key")]
        runtime_port = free_port(taken)
        command = [_tool("flower-supernode")] if stock else [sys.executable, "-m", "fedaccel.flower.node"]
        procs.start(f"supernode{i}", [
            *command, *node_security, "--superlink", f"127.0.0.1:{link_port}",
            "--host", "127.0.0.1", "--port", str(runtime_port),
            "--isolation", "subprocess" if stock else "process",
            "--node-config", f"partition-id={i} num-partitions={n} state-dir='{node_env_home / 'state'}'"])
    procs.env = env
    say(f"fedaccel deploy: {n} SuperNodes started; `flwr run` submits the run ({time.monotonic() - began:.0f} s)")
    return procs.start("flwr-run", [_tool("flwr"), "run", str(app), "local", "--stream",
                                    "--run-config", str(secrets / RUN_CONFIG)])


def deploy(
    config: Config, run_dir: Path, *, clients: int | None = None, timeout: float = 3600.0, tls: Path | None = None,
    stock: bool = False, resume: bool = False, progress: bool | None = None,
) -> Path:
    """Run ``config`` on a SuperLink and ``clients`` SuperNodes started on localhost.

    ``tls``: a folder from ``fedaccel certs`` — TLS everywhere, and only SuperNodes whose public
    key was registered may join (see :mod:`fedaccel.flower.security`).

    By default every SuperNode runs with ``--isolation process`` and fedaccel's ClientApp
    executor as a thread of the SuperNode process, warm across rounds (:mod:`fedaccel.flower.node`);
    ``stock`` uses Flower's own ``flower-supernode`` with a fresh ClientApp process per message.
    ``resume``: continue the run in ``run_dir`` from its last checkpoint, with the clients' states
    of that round (each SuperNode keeps them in ``RUN_DIR/flower/node<i>/state``).
    ``progress``: the progress bar on stderr (default: ``run.progress``).
    Ctrl-C / SIGTERM raise :class:`~fedaccel.runs.stopping.Interrupted` with the checkpoint's round.
    """
    from fedaccel.runs.folder import removed_on_failed_start
    from fedaccel.runs.loop import progress_bar, run_line

    before = set(run_dir.iterdir()) if run_dir.is_dir() else None
    run_dir = run_dir.resolve()
    with removed_on_failed_start(run_dir, before):
        # One deployment per folder (held until deploy returns); the run folder's own lock only
        # while preparing it (refused while another process, e.g. a ServerApp, writes the run):
        # then it is the ServerApp's, which holds it while it writes (fedaccel.flower.apps).
        deployment = lock_run_dir(run_dir / "flower")  # noqa: F841
        with lock_run_dir(run_dir):
            app = prepare(config, run_dir, clients=clients, resume=resume)
    n = config.data.clients
    flower = run_dir / "flower"
    link_port = free_port()
    if tls is not None:
        from fedaccel.flower.security import check_certificates

        tls = tls.resolve()
        check_certificates(tls, n)
    home = flower / "home"
    write_flwr_home(home, f"127.0.0.1:{link_port}", tls / "ca.crt" if tls else None)
    bin_dir = str(Path(sys.executable).parent)  # Flower starts flower-superexec, flwr-serverapp... by name
    path = os.pathsep.join([die_with_parents(flower / "bin"), bin_dir, os.environ.get("PATH", "")])
    env = {**os.environ, **ENV, "FLWR_HOME": str(home), "PATH": path}
    procs = Processes(flower, env)
    show = config.run.progress if progress is None else progress
    done = checkpoint_round(run_dir) if resume else 0
    if show:  # at once, as `fedaccel run` does: the processes and the data take a while to start
        what = f"model {config.model['name']} (each SuperNode builds it), {n} clients"
        print(run_line(config, run_dir, done, what, 'runtime flower-deployment' + (', TLS' if tls else '')),
              file=sys.stderr, flush=True)
        print(f"starting SuperLink and {n} SuperNodes", file=sys.stderr, flush=True)
    bar = progress_bar(config.train.rounds, done, config.display_name, show)
    stream = Stream(flower / "flwr-run.log", bar, quiet=not show, rounds=config.train.rounds)
    with Interrupts(run_dir / STOP_FILE) as stop:
        try:
            before = summary_stamp(run_dir)
            runner = start_processes(procs, app, run_dir, n, link_port, tls=tls, stock=stock,
                                     say=stream.say if show else None)
            stop.graceful = True
            watch(runner, procs, timeout, stream, stop, grace=config.run.timeout + 60.0,
                  finished=lambda: finished_since(run_dir, before))
            for _ in range(100):  # `flwr run --stream` may return before the ServerApp's last write
                if (run_dir / "summary.json").is_file() or stop.asked.is_set() or stream.error:
                    break
                time.sleep(0.1)
        except KeyboardInterrupt:  # at once: the last checkpoint is what there is
            stop.asked.set()
        finally:
            stop.stopping = True
            bar.close()
            procs.stop()
    if (run_dir / "summary.json").is_file():
        return run_dir
    if stop.asked.is_set():
        raise Interrupted(run_dir, checkpoint_round(run_dir), stop.reason)
    raise UserError(stream.error or f"the deployed run did not finish; logs in {flower}")
