"""The ``fedaccel`` command line.

    fedaccel run configs/demo_fedavg.yaml --set train.rounds=20
    fedaccel run --resume runs/fedavg-s0-20261122-101500
    fedaccel experiment experiments/demo.yaml
    fedaccel experiment experiments/demo.yaml --ray auto --cpus-per-cell 1   # cells as Ray tasks
    fedaccel pack runs/demo -o demo.jsonl.xz      # finished cells to carry; experiment ... --from demo.jsonl.xz
    fedaccel plot runs/demo -o curves.png
    fedaccel compare runs/demo --targets 0.8 0.85 --baseline fedavg
    fedaccel split-report --set data.split=case3 --set data.clients=5
    fedaccel check-resume configs/demo.yaml --set algorithm=mine   # a method keeps no state outside its states
    fedaccel reproduce bherd [--scale paper] [--only fig3_alpha] [--render-only]
    fedaccel deploy --clients 5 configs/demo.yaml        # SuperLink + 5 SuperNodes (Flower)
    fedaccel deploy --prepare --tls tls configs/demo.yaml --out RUN_DIR   # a run folder for SuperNodes on other hosts
    fedaccel certs tls --clients 5 && fedaccel deploy --tls tls --clients 5 configs/demo.yaml
    fedaccel algorithms                    # the methods: built in, and from installed packages (entry points)
    fedaccel data [--install]
    fedaccel data get mnist cifar10        # download, check, unpack into ~/.cache/fedaccel (resumable)

A user's mistake prints one line (``error: ...``) and exits with status 2; ``--debug`` shows
the traceback. So does any file-system error (the path and the cause: read-only, permission
denied, a name too long, ...). A full disk prints one line too (which file, how to continue) and
exits with 1.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import errno
import os
import shlex
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from fedaccel.errors import UserError, check_png_output, disk_full, shown, too_large


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    from fedaccel.runs.stopping import Interrupted

    try:
        code = int(args.handler(args) or 0)
        sys.stdout.flush()  # a reader that went away (`| head`) shows here, not at exit
        return code
    except BrokenPipeError:
        return reader_gone()
    except Interrupted as exc:
        if args.command in ("experiment", "reproduce") and exc.round is not None:  # a cell's stop (a stacked group's
            exc = Interrupted(exc.run_dir, None, exc.reason)  # seeds, say): the command continues every one of them
        print(exc.how_to_continue(continue_command(args, argv, exc.run_dir)), file=sys.stderr)
        return 130
    except UserError as exc:
        if args.debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (OSError, RuntimeError) as exc:
        if args.debug:
            raise
        if disk_full(exc) or too_large(exc):
            message = too_large_message(exc) if too_large(exc) else disk_full_message(args, argv, exc)
            print(f"error: {message}", file=sys.stderr)
            return 1
        if not isinstance(exc, OSError):
            raise  # a RuntimeError that is no full disk: a bug, with its traceback
        print(f"error: {os_error_message(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if args.command in ("run", "deploy") and not args.resume:
            print("interrupted before the first round: nothing to continue", file=sys.stderr)
        else:
            print(f"interrupted; `{continue_command(args, argv, None)}` continues", file=sys.stderr)
        return 130


@contextmanager
def said_if_slow(line: str, after_s: float = 2.0, quiet: bool = False) -> Iterator[None]:
    """``line`` on stderr if the block is still running after ``after_s`` seconds (no silence while torch
    loads; nothing before a quick answer or a one-line error)."""
    timer = threading.Timer(after_s, lambda: print(line, file=sys.stderr, flush=True))
    timer.daemon = True
    if not quiet:
        timer.start()
    try:
        yield
    finally:
        timer.cancel()


def reader_gone() -> int:
    """stdout's reader stopped reading (``fedaccel compare ... | head -1``): no traceback, and what is
    left to print goes nowhere (Python's own flush at exit would fail again); exit status 1."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is no file (captured): nothing is flushed to it at exit
        pass
    return 1



#: What to do about a file-system error, by errno (the cause itself is the system's words, ``strerror``).
OS_ERROR_ADVICE = {
    errno.EROFS: "the folder is on a read-only file system: copy it somewhere you can write, or give another --out",
    errno.EACCES: "you may not do this there: give a folder you own, or change its permissions",
    errno.EPERM: "you may not do this there: give a folder you own, or change its permissions",
    errno.ENAMETOOLONG: "a name in it is longer than this file system takes; give a shorter name (name:, --out)",
}


def os_error_message(exc: OSError) -> str:
    """One line for a file-system error the command cannot get past: the path, the cause and, where one helps,
    what to do (a read-only folder, no permission, a name too long); ``--debug`` shows the traceback."""
    path = exc.filename if exc.filename is not None else exc.filename2
    where = shown(os.fsdecode(path), 120) if isinstance(path, (str, bytes)) else "a file"
    cause = (exc.strerror or type(exc).__name__).rstrip(".")
    advice = OS_ERROR_ADVICE.get(exc.errno) if exc.errno is not None else None
    return f"{where}: {cause}" + (f"; {advice}" if advice else "") + " (--debug shows where)"


def too_large_message(exc: OSError) -> str:
    """One line for EFBIG: the file, and the limit that stopped it."""
    where = f"writing {exc.filename}" if exc.filename else "writing a file"
    return (f"{where} failed: the file would pass this shell's file-size limit (`ulimit -f`); raise the limit, "
            "then run the same command again (a run continues from its last checkpoint with --resume)")


def disk_full_message(args: argparse.Namespace, argv: Sequence[str], exc: BaseException) -> str:
    """One line for a full disk: the file, the space left there, and the command that continues."""
    import shutil

    filename = getattr(exc, "filename", None)
    file = Path(filename) if filename else None
    run_dir = file.parent if file is not None and (file.parent / "config.yaml").is_file() else None
    if run_dir is None and args.command in ("run", "deploy") and getattr(args, "out", None):
        run_dir = Path(args.out)
    where = f"writing {file}" if file is not None else "writing a file"
    try:
        free = shutil.disk_usage(file.parent if file is not None else Path.cwd()).free
        left = f" ({free / 2**20:.0f} MB free there)"
    except OSError:
        left = ""
    if args.command in ("run", "deploy") and run_dir is None and not args.resume:
        how = f"free some space, then `fedaccel {args.command} --resume RUN_DIR` (the run folder it started)"
    else:
        how = f"free some space, then `{continue_command(args, argv, run_dir)}`"
    return (f"the disk is full: {where} failed{left}. What was checkpointed is kept; {how} "
            "continues from the last checkpoint")


def continue_command(args: argparse.Namespace, argv: Sequence[str], run_dir: Path | None) -> str:
    """The command that continues an interrupted one: ``--resume RUN_DIR`` for a single run, the
    same command line for grids and reproductions (they resume their unfinished cells)."""
    if args.command in ("run", "deploy") and (run_dir is not None or args.resume):
        return f"fedaccel {args.command} --resume {shlex.quote(str(run_dir or args.resume))}"
    return shlex.join(["fedaccel", *argv])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fedaccel", description="Federated learning on non-IID data.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for user errors")
    sub = parser.add_subparsers(dest="command")

    p = sub.add_parser("run", help="run one config")
    p.add_argument("config", nargs="?", help="YAML config (defaults apply to what it leaves out)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    p.add_argument("--out", help="run folder to create (default: under run.out_dir)")
    p.add_argument("--resume", metavar="RUN_DIR",
                   help="continue an interrupted run (with --set run.device=cpu: on another device)")
    p.add_argument("--no-progress", action="store_true")
    add_tensorboard_option(p)
    p.set_defaults(handler=cmd_run)

    p = sub.add_parser("deploy", help="run a config on a SuperLink and SuperNodes started on this host")
    p.add_argument("config", nargs="?", help="YAML config (defaults apply to what it leaves out)")
    p.add_argument("--clients", type=int, help="SuperNodes to start (default and check: data.clients)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    p.add_argument("--out", help="run folder to create (default: under run.out_dir)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds before the run is given up")
    p.add_argument("--tls", metavar="DIR", help="certificates and SuperNode keys from `fedaccel certs DIR`")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue a deployed run from its last checkpoint")
    p.add_argument("--stock", action="store_true",
                   help="Flower's own SuperNodes, a fresh ClientApp process per message (slow)")
    p.add_argument("--prepare", action="store_true",
                   help="only make the run folder (--out) and print the commands for SuperNodes on other hosts")
    p.add_argument("--port", type=int, default=9093, help="with --prepare: the SuperLink's port (default 9093)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(handler=cmd_deploy)

    p = sub.add_parser("certs", help="TLS certificates and SuperNode keys for `fedaccel deploy --tls`")
    p.add_argument("folder")
    p.add_argument("--clients", type=int, required=True, help="SuperNode key pairs to create")
    p.add_argument("--host", action="append", default=[], help="SuperLink host name or IP (default 127.0.0.1, localhost)")
    p.add_argument("--force", action="store_true", help="write into a folder that already holds files (keys in it are replaced)")
    p.set_defaults(handler=cmd_certs)

    p = sub.add_parser("experiment", help="run a grid of configs, then plot and tabulate")
    p.add_argument("file", help="the experiment file (YAML: base, grid, targets, claims; docs/experiments.md)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override in every cell")
    p.add_argument("--out", help="the experiment's folder, its cells' run folders inside (default: the file's "
                                 "out_dir, else runs/<name>)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--stack-seeds", action="store_true",
                   help="train the seeds of each cell as one stacked computation (same per-seed results)")
    p.add_argument("--stack-arms", action="store_true",
                   help="with the seeds, a grid's algorithms too: cells that differ only in run.seed and algorithm "
                        "as one stacked computation (same per-run results; every run's data in memory at once)")
    p.add_argument("--from", dest="from_packed", metavar="PACKED",
                   help="first write the finished cells stored in PACKED (a .jsonl.xz of `fedaccel pack`) into the "
                        "grid's folder, so they are not run again (a folder already there is kept)")
    p.add_argument("--fail-fast", action="store_true",
                   help="stop the grid at the first cell whose run raises (by default the other cells go on); "
                        "either way a failed cell makes the exit status 1")
    add_workers_option(p, stacked=True)
    add_ray_options(p)
    add_tensorboard_option(p)
    p.set_defaults(handler=cmd_experiment)

    p = sub.add_parser("pack", help="a grid folder's finished cells in one .jsonl.xz, to carry to another machine")
    p.add_argument("folder", help="the grid's folder (its cells' run folders inside)")
    p.add_argument("-o", "--out", required=True, help="the file to write (<name>.jsonl.xz; replaced if there)")
    p.set_defaults(handler=cmd_pack)

    p = sub.add_parser("plot", help="accuracy and loss curves of runs (PNG), and their diagnostics on request")
    p.add_argument("runs", nargs="+", help="run folders or experiment folders")
    p.add_argument("-o", "--out", default="curves.png", help="the PNG to write (nothing else is written)")
    add_force_option(p)
    p.add_argument("--diagnostics", action="store_true",
                   help="also the algorithms' diagnostic plots, beside -o as <name>-<diagnostic>.png")
    p.add_argument("--metrics", nargs="+", help="default: a grid's metrics:, else test_acc test_loss train_loss")
    p.add_argument("--title", help="default: a grid's name")
    p.add_argument("--targets", nargs="*", type=float,
                   help="dotted lines on the test accuracy panel (default: a grid's targets:; --targets alone: no lines)")
    p.set_defaults(handler=cmd_plot)

    p = sub.add_parser("compare", help="rounds to target accuracy and speed-ups (Markdown)")
    p.add_argument("runs", nargs="+")
    p.add_argument("--targets", nargs="+", type=float,
                   help=f"default: a grid's, as in its table.md; else {' '.join(map(str, COMPARE_TARGETS))}")
    p.add_argument("--baseline", help="label of the baseline (default: a grid's baseline:, else fedavg, else the first)")
    p.add_argument("--metric", default="test_acc")
    p.set_defaults(handler=cmd_compare)

    p = sub.add_parser("judge", help="judge an experiment's claims on its runs (exact paired tests, BH), or plan seeds")
    p.add_argument("grid", help="a grid folder (its experiment.yaml holds the claims) or an experiment file")
    p.add_argument("--claims", help="the experiment file whose claims: section to judge (default: GRID/experiment.yaml)")
    p.add_argument("--plan", action="store_true", help="treat the grid as a pilot: seeds each claim needs for --power")
    p.add_argument("--power", type=float, default=0.8)
    p.add_argument("--partial", action="store_true",
                   help="judge the complete pairs of an unfinished grid (every affected claim says so)")
    p.set_defaults(handler=cmd_judge)

    p = sub.add_parser("check-resume", help="run a config whole and stopped-then-resumed: the same numbers, or "
                                            "state a method keeps outside its states")
    p.add_argument("config", nargs="?")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--after", type=int, help="the round to stop after (default: half of train.rounds)")
    p.set_defaults(handler=cmd_check_resume)

    p = sub.add_parser("split-report", help="per-client label counts of a split, and a heat map")
    p.add_argument("config", nargs="?")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("-o", "--out", default="split.png", help="the heat map's PNG")
    add_force_option(p)
    p.set_defaults(handler=cmd_split_report)

    p = sub.add_parser("reproduce", help="run a paper's experiments and write its reproduction report")
    p.add_argument("paper", help=f"one of {', '.join(PAPERS)} (its experiments: experiments/<paper>/)")
    p.add_argument("--scale", default="quick", choices=["quick", "paper"])
    p.add_argument("--only", nargs="+", default=[], help="experiment names (file stems) to run (with --plan: to plan)")
    p.add_argument("--plan", action="store_true",
                   help="run nothing: the committed data as a pilot, the seeds each claim needs for 80%% power")
    p.add_argument("--render-only", action="store_true",
                   help="run nothing: draw the report and figures again from the committed data")
    p.add_argument("--no-progress", action="store_true")
    add_workers_option(p)
    add_ray_options(p)
    p.set_defaults(handler=cmd_reproduce)

    p = sub.add_parser("tensorboard", help="TensorBoard event files for finished runs (a run or a grid folder)")
    p.add_argument("folder")
    p.set_defaults(handler=cmd_tensorboard)

    p = sub.add_parser("algorithms", help="the methods `algorithm:` takes: built in, and from installed packages")
    p.set_defaults(handler=cmd_algorithms)

    p = sub.add_parser("data", help="list datasets and where they are; `data get NAME` downloads one",
                       usage="fedaccel data [-h] [--install]  |  fedaccel data get [-h] NAME [NAME ...]")
    p.add_argument("--install", action="store_true", help="install the embedded Fashion-MNIST")
    p.set_defaults(handler=cmd_data, data_command=None)
    get = p.add_subparsers(dest="data_command", metavar="{get}", title="to download one (optional)").add_parser(
        "get", help="download a dataset into the folder loading looks in (checksum checked, resumable)")
    get.add_argument("names", nargs="+", metavar="NAME", help="mnist, fashion-mnist, emnist, cifar10 or cifar100")
    get.add_argument("--to", metavar="FOLDER", help="put it here (default: FEDACCEL_DATA_<NAME>, "
                     "$FEDACCEL_DATA/<name>, else ~/.cache/fedaccel/<name>)")
    get.add_argument("--force", action="store_true", help="download again even when the files are there")
    get.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    return parser


def add_workers_option(parser: argparse.ArgumentParser, *, stacked: bool = False) -> None:
    """``-j``; ``stacked``: the command has ``--stack-seeds`` and ``--stack-arms``, whose groups it then counts."""
    said = "; with --stack-seeds or --stack-arms: stacked groups" if stacked else ""
    parser.add_argument("-j", "--workers", type=int, default=1, metavar="N",
                        help=f"cells run at once, each in its own process with one torch thread (default 1{said})")


def add_ray_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ray", metavar="auto|ADDRESS",
                        help="run each cell as a task on a Ray cluster (auto: this host's cluster, else a local "
                             "one); out_dir must be on a filesystem every node sees")
    parser.add_argument("--cpus-per-cell", type=float, default=1.0, metavar="N",
                        help="with --ray: CPUs each cell asks for (its torch threads; default 1)")
    parser.add_argument("--gpus-per-cell", type=float, default=0.0, metavar="N",
                        help="with --ray: GPUs each cell asks for (default 0)")


def ray_options(args: argparse.Namespace) -> object:
    """The ``--ray`` options as :class:`fedaccel.grids.ray_tasks.RayOptions` (None without ``--ray``)."""
    if args.ray is None:
        if args.cpus_per_cell != 1.0 or args.gpus_per_cell != 0.0:
            raise UserError("--cpus-per-cell and --gpus-per-cell go with --ray")
        return None
    if args.workers != 1:
        raise UserError("-j and --ray do not go together: with --ray the cluster's resources say how many cells run")
    from fedaccel.grids.ray_tasks import RayOptions

    return RayOptions(args.ray, cpus_per_cell=args.cpus_per_cell, gpus_per_cell=args.gpus_per_cell)


def add_force_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--force", action="store_true",
                        help="write the PNG even over an existing file that is not a PNG (by default such a file "
                             "is left alone: fedaccel only redraws PNGs)")


def add_tensorboard_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tensorboard", dest="set", action="append_const", const="run.tensorboard=true",
                        help="write TensorBoard event files into the run folder (run.tensorboard=true)")


def cmd_tensorboard(args: argparse.Namespace) -> int:
    from fedaccel.runs.tensorboard import convert

    runs = convert(args.folder)
    print(f"event files written for {len(runs)} run{'s' if len(runs) != 1 else ''}; "
          f"view them with: tensorboard --logdir {args.folder}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    if not args.resume and args.config is not None:
        _check_config_path(Path(args.config))  # answered before torch is imported (seconds on a loaded machine)
    from fedaccel.launch import resume, run
    from fedaccel.report.diagnostics import contribution_ranking
    from fedaccel.runs.config import load_config

    progress = False if args.no_progress else None
    if args.resume:
        device = _resume_device(args)
        path = resume(args.resume, progress=progress, device=device)
    else:
        path = run(load_config(args.config, args.set), args.out, progress=progress)
    ranking = contribution_ranking(path)
    if ranking:
        print("contribution ranking (median GSNR over the rounds a client was scored):")
        for place, (client, score, rounds) in enumerate(ranking, start=1):
            print(f"  {place:>3}. client {client:>4}  GSNR {score:.4f}  ({rounds} rounds)")
    print_result(path)
    return 0


def print_result(path: Path) -> None:
    """A finished run's last line (its final metrics, ``fedaccel run`` and ``deploy`` alike) and its folder."""
    from fedaccel.report.reading import load_run

    final = load_run(path).metrics[-1]
    print(f"round {final['round']}: test accuracy {final['test_acc']:.4f}, test loss {final['test_loss']:.4f}, "
          f"train loss {final['train_loss']:.4f}")
    print(f"run folder: {path}")


def _check_config_path(path: Path) -> None:
    """A missing config file or a folder in its place, in load_config's own words."""
    from fedaccel.errors import ConfigError

    if path.is_dir():
        raise ConfigError(f"{path} is a folder; give a YAML config file")
    if not path.exists():
        raise ConfigError(f"config file {path} not found")


def _resume_device(args: argparse.Namespace) -> str | None:
    """``--resume`` takes the run folder and at most ``--set run.device=...`` (where it continues)."""
    keys = [item.partition("=") for item in args.set]
    if args.config or any(key.strip() != "run.device" for key, _, _ in keys):
        more = ""
        if any(key.strip() == "train.rounds" for key, _, _ in keys):
            from fedaccel.runs.finished import more_rounds

            more = "; " + more_rounds(args.resume)
        raise UserError("--resume takes the run folder only (and --set run.device=...); "
                        f"its config.yaml is used as it is{more}")
    return keys[-1][2].strip() if keys else None


def cmd_deploy(args: argparse.Namespace) -> int:
    from fedaccel.disk import write_atomic
    from fedaccel.flower.deploy import deploy, prepare, write_flwr_home
    from fedaccel.flower.security import check_certificates
    from fedaccel.runs.config import load_config, read_run_config
    from fedaccel.runs.folder import check_out_folder, new_run_dir

    if args.resume:
        if args.config or args.set or args.out:
            raise UserError("--resume takes the run folder only; its config.yaml is used as it is")
        from fedaccel.disk import refuse_planted_links
        from fedaccel.runs.finished import said_finished
        from fedaccel.runs.folder import RUN_FILES

        out = Path(args.resume)
        refuse_planted_links(out, RUN_FILES)  # a folder from someone else: before anything is read
        if not (out / "config.yaml").is_file():
            raise UserError(f"{out} is not a run folder (no config.yaml)")
        config = read_run_config(out / "config.yaml")
        if config.run.runtime != "flower-deployment":  # its SuperNodes would wait for clients it never had
            if said_finished(out, config):
                return 0
            raise UserError(f"{out} ran with run.runtime {config.run.runtime}, not as a deployment: "
                            f"`fedaccel run --resume {shlex.quote(str(out))}` continues it")
        if said_finished(out, config):  # at once, before a SuperLink and its SuperNodes start
            return 0
        refuse_prepared(out, "with them up, run its `flwr run` again on the server host")  # not this host's run
    else:
        with said_if_slow(f"reading {args.config or 'the defaults'} (torch loads)", quiet=args.no_progress):
            config = load_config(args.config, list(args.set) + ["run.runtime=flower-deployment"])
        if args.clients is not None and args.clients != config.data.clients:
            raise UserError(f"--clients {args.clients} but data.clients = {config.data.clients} (one SuperNode per "
                            f"client): --set data.clients={args.clients}, or leave --clients out")
        out = Path(args.out) if args.out else new_run_dir(config)
        refuse_prepared(out, "its commands are those printed then, and a new run takes another --out; the server's "
                             "last")
        check_out_folder(out)
    if args.prepare:
        if args.resume:
            raise UserError("--prepare makes a new run folder; to continue one, run the same `flwr run` again")
        if not args.tls:
            raise UserError("--prepare needs --tls DIR: SuperNodes on other hosts join over TLS with registered keys "
                            "(`fedaccel certs DIR --clients N --host SERVER --host 127.0.0.1`)")
        tls = Path(args.tls).resolve()
        check_certificates(tls, config.data.clients)
        app = prepare(config, out.resolve(), clients=args.clients)
        write_flwr_home(app.parent / "home", f"127.0.0.1:{args.port}", tls / "ca.crt")
        write_atomic(app.parent / PREPARED, "")  # for deploy --resume and --prepare again: not this host's run
        print_multi_host_commands(app, config.data.clients, tls, args.port)
        return 0
    path = deploy(config, out, clients=args.clients, timeout=args.timeout, tls=Path(args.tls) if args.tls else None,
                  stock=args.stock, resume=bool(args.resume), progress=False if args.no_progress else None)
    print_result(path)  # reads the run after: nothing but what starts the processes comes first
    return 0


def print_multi_host_commands(app: Path, clients: int, tls: Path, port: int) -> None:
    """What to run on each host for the run folder ``app.parent.parent`` (see docs/flower.md)."""
    from fedaccel.flower.security import served_name

    quote = shlex.quote
    flower = app.parent
    run_dir, home, secrets = flower.parent, quote(str(flower / "home")), flower / "secrets"
    print(f"run folder: {run_dir} (config.yaml: data.clients = {clients}, so {clients} SuperNodes)")
    print(f"server host:  python -m fedaccel.flower.link --secrets {quote(str(secrets))} "
          f"--ssl-ca-certfile {quote(str(tls / 'ca.crt'))} --ssl-certfile {quote(str(tls / 'server.pem'))} "
          f"--ssl-keyfile {quote(str(tls / 'server.key'))} --enable-supernode-auth --host 0.0.0.0 --port {port}")
    print(f"server host, <i> = 0..{clients - 1}:  FLWR_HOME={home} flwr supernode register "
          f"{quote(str(tls))}/node<i>_key.pub local")
    address = quote(f"{served_name(tls)}:{port}")  # the name the certificate gives the server (`certs --host`)
    print(f"client host <i> (with ca.crt and node<i>_key):  python -m fedaccel.flower.node --root-certificates ca.crt "
          f"--auth-supernode-private-key node<i>_key --superlink {address} --port 9094 --isolation process "
          f"--node-config \"partition-id=<i> num-partitions={clients} state-dir='/var/tmp/fedaccel'\"")
    print(f"then, on the server host:  {flwr_run_command(app)}")
    print(f"(other hosts are served the Fleet API only; the Control API takes the token in {home}/credentials.yaml: "
          "docs/threat-model.md)")


PREPARED = "prepared"  # RUN_DIR/flower/prepared: made by deploy --prepare, for SuperNodes on other hosts


def refuse_prepared(out: Path, what_to_do: str) -> None:
    """One line where ``out`` was made by ``deploy --prepare`` (a local SuperLink and SuperNodes, without TLS,
    would take over a run meant for other hosts): ``what_to_do``, then the server host's ``flwr run``."""
    if (out / "flower" / PREPARED).is_file():
        raise UserError(f"{out} was prepared for SuperNodes on other hosts (deploy --prepare): {what_to_do}: "
                        f"{flwr_run_command((out / 'flower' / 'app').resolve())}")


def flwr_run_command(app: Path) -> str:
    """The server host's ``flwr run`` of the prepared run whose Flower App is ``app`` (RUN_DIR/flower/app)."""
    home, secrets = shlex.quote(str(app.parent / "home")), app.parent / "secrets"
    return (f"FLWR_HOME={home} flwr run {shlex.quote(str(app))} local --stream "
            f"--run-config {shlex.quote(str(secrets / 'run-config.toml'))}")


def cmd_certs(args: argparse.Namespace) -> int:
    folder = Path(args.folder)
    if any(not host.strip() for host in args.host):
        raise UserError("--host takes a host name or IP address of the SuperLink, not an empty string")
    if folder.is_dir() and any(folder.iterdir()) and not args.force:
        raise UserError(f"{folder} already holds files; certificates and keys go into a new or empty folder "
                        "(or add --force to replace them)")
    try:
        from fedaccel.flower.security import make_certificates
    except ModuleNotFoundError as missing:
        raise UserError(f"fedaccel certs needs the package {missing.name}, which comes with the Flower extra "
                        "(pip install 'fedaccel[flower]')") from None
    folder = make_certificates(folder, args.clients, args.host or ("127.0.0.1", "localhost"))
    print(f"CA, SuperLink certificate and {args.clients} SuperNode key pairs in {folder}")
    print(f"use them with: fedaccel deploy --tls {folder} --clients {args.clients} CONFIG")
    return 0


def cmd_experiment(args: argparse.Namespace) -> int:
    if not Path(args.file).exists():
        raise UserError(f"experiment file {args.file} not found")
    with said_if_slow(f"reading {args.file} (its cells' configs: torch loads)", quiet=args.no_progress):
        from fedaccel.grids.experiment import load_experiment, run_experiment, seeds_note

        experiment = load_experiment(args.file, args.set)
    if note := seeds_note(experiment):
        print(note, file=sys.stderr, flush=True)
    if args.out:
        experiment = dataclasses.replace(experiment, out_dir=Path(args.out))
    ray = ray_options(args)
    if args.from_packed:
        from fedaccel.grids.experiment import check_grid_folder, check_run_options
        from fedaccel.reproductions.carry import restore_finished
        from fedaccel.runs.folder import removed_on_failed_start
        from fedaccel.runs.lock import lock_run_dir

        check_run_options(args.workers, args.stack_seeds, args.stack_arms, ray)  # before a cell is written
        check_grid_folder(experiment)  # before the lock makes the folder
        made = not experiment.out_dir.exists()  # refused, the folder the lock made goes too ("nothing written")
        with removed_on_failed_start(experiment.out_dir, None) if made else contextlib.nullcontext():
            with lock_run_dir(experiment.out_dir):  # not into the folder of an experiment running there
                print(restore_finished(experiment, Path(args.from_packed)).line(Path(args.from_packed)), flush=True)
    from fedaccel.grids.cell import CellFailed
    from fedaccel.grids.experiment import CellsFailed

    failed = None
    try:
        result = run_experiment(experiment, progress=False if args.no_progress else None,
                                workers=args.workers, stack_seeds=args.stack_seeds,
                                stack_arms=args.stack_arms, ray=ray, fail_fast=args.fail_fast)
    except CellsFailed as exc:
        result, failed = exc.result, exc
    except CellFailed as exc:  # --fail-fast: the first one stopped the grid
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if result is not None:  # None: every cell failed, nothing to tabulate
        print()
        print(result.table)
        print()
        print(f"table: {result.out_dir / 'table.md'}")
        print(f"plot:  {result.plot}")
    if failed is not None:
        print(f"error: {failed}", file=sys.stderr)
        return 1
    return 0


def cmd_pack(args: argparse.Namespace) -> int:
    from fedaccel.reproductions.carry import pack_finished

    count = pack_finished(Path(args.folder), Path(args.out))
    print(f"{args.out}: {count} finished cell(s) of {args.folder}; `fedaccel experiment FILE --from {args.out}` "
          "writes them into a grid folder")
    return 0


PLOT_METRICS = ("test_acc", "test_loss", "train_loss")
PAPERS = ("bherd", "fedgsnr", "fedumf", "field", "privacy")  # reproduce's papers (a test holds it to the folders)
COMPARE_TARGETS = (0.5, 0.7, 0.8)  # without --targets and without a grid's targets:


def cmd_plot(args: argparse.Namespace) -> int:
    from fedaccel.grids.view import grid_view
    from fedaccel.report.diagnostics import diagnostic_figures, draw_diagnostics
    from fedaccel.report.figures import plot_curves
    from fedaccel.report.reading import load_runs

    out = Path(args.out)
    check_output_folder(out)
    check_accuracy_targets(args.targets or [], "--targets (lines on the test accuracy panel)")
    view = grid_view(args.runs, load_runs(args.runs))
    warn_incomplete(args.runs, view.runs)
    figures = diagnostic_figures([r.path for r in view.runs]) if args.diagnostics else []  # all read before one is drawn
    if args.diagnostics and not figures:
        raise UserError(f"--diagnostics: none of the {len(view.runs)} runs recorded diagnostics to draw (BHerd, "
                        "GraB and FedGSNR do, in diagnostics.jsonl); nothing written: plot without --diagnostics")
    targets, source = ((args.targets, "--targets") if args.targets is not None else (view.targets, "grid's targets"))
    existed = out.is_file()  # a PNG is redrawn in place (plot_curves refuses any other file): said, not silent
    print(plot_curves(view.runs, out, metrics=tuple(args.metrics or view.metrics or PLOT_METRICS),
                      title=view.name if args.title is None else args.title, targets=targets, targets_from=source,
                      palette=view.palette, force=args.force))
    if existed:
        print(f"(drawn over the PNG that was at {out.resolve()})", file=sys.stderr)
    for path in draw_diagnostics(figures, out.with_suffix(""), force=args.force):
        print(path)
    return 0


def check_accuracy_targets(targets: Sequence[float], what: str) -> None:
    """Accuracy targets are fractions: 90 (a percentage) or a NaN is one line, not a table of dashes."""
    wrong = [t for t in targets if not 0.0 <= t <= 1.0]
    if wrong:
        hint = f" (as a fraction: {wrong[0] / 100:g})" if 1.0 < wrong[0] <= 100.0 else ""
        raise UserError(f"{what}: {wrong[0]:g} is not an accuracy between 0 and 1{hint}")


def check_output_folder(out: Path) -> None:
    """A PNG asked for with ``-o`` goes into a folder that exists: a mistyped path is one line,
    never a tree of new folders."""
    if not out.parent.is_dir():
        raise UserError(f"{out.parent} is not a folder: -o {out} names a file in a folder that does not exist; "
                        "create the folder first, or give another path")


def cmd_compare(args: argparse.Namespace) -> int:
    from fedaccel.grids.view import grid_view
    from fedaccel.report.reading import check_installed, load_runs, unnamed_differences
    from fedaccel.report.tables import compare_table

    if args.targets and args.metric.rpartition("/")[2].endswith("_acc"):
        check_accuracy_targets(args.targets, f"--targets (of {args.metric})")
    runs = load_runs(args.runs)
    check_installed(runs)  # a table of a plugin's runs is for the version that made them
    view = grid_view(args.runs, runs)
    warn_incomplete(args.runs, view.runs)
    differing = unnamed_differences(view.runs)
    if differing:
        print(f"note: these runs differ in more than their method: {', '.join(differing)}; the table compares them "
              "on different settings", file=sys.stderr)
    targets = args.targets or view.table_targets or COMPARE_TARGETS
    print(compare_table(view.runs, targets, baseline=args.baseline or view.baseline, metric=args.metric))
    return 0


def warn_incomplete(paths: Sequence[str], runs: Sequence[object]) -> None:
    """One line on stderr naming the cells of the grids given (or the runs) that are missing, unfinished or running."""
    from fedaccel.grids.gaps import folder_gaps
    from fedaccel.report.completeness import gaps_line

    gaps, total = folder_gaps(paths, runs)  # type: ignore[arg-type]
    if gaps:
        print(f"warning: {gaps_line(gaps, total)} (an unfinished run that has not reached a target is left out "
              "of its rounds)", file=sys.stderr)


def cmd_judge(args: argparse.Namespace) -> int:
    from fedaccel.grids.experiment import COPY, cell_seed, check_looks_seeds, experiment_cells
    from fedaccel.grids.gaps import copied_cells
    from fedaccel.report.completeness import gaps_line
    from fedaccel.report.judge import (
        claims_from_file,
        gather,
        judge_grid,
        looks_from_file,
        plan,
        plan_table,
        table,
        write_claims,
    )

    grid = Path(args.grid)
    if not grid.exists():
        raise UserError(f"grid folder not found: {grid}")
    source = Path(args.claims) if args.claims else grid if grid.is_file() else grid / COPY
    if not source.is_file():
        raise UserError(f"no claims to judge: {source} not found (give --claims EXPERIMENT.yaml)")
    try:
        claims, tuning, out_dir = claims_from_file(source)
        raised = looks_from_file(source)
    except (ValueError, TypeError, OverflowError) as exc:  # a claim's value its parser could not take
        raise UserError(f"{source}: a claim holds a value it cannot take ({exc})") from None
    folder = out_dir if grid.is_file() else grid
    if not claims:
        raise UserError(f"{source} has no claims: section (see docs/experiments.md, \"Your own claims\")")
    if not 0 < args.power < 1:
        raise UserError(f"--power must be between 0 and 1, got {args.power}")
    cells = experiment_cells(grid) if grid.is_file() else copied_cells(folder)
    evidence = gather(folder, claims, str(source), cells)
    if raised is not None:  # the grid's seeds: its cells' (as spelled; a base's seed unread) and its runs'
        check_looks_seeds(source, raised.looks, {run.seed for run in evidence.runs} | (
            set() if cells is None else {cell_seed(spec) for _, spec in cells}))
    left_out = evidence.depends if args.partial else []
    if any(evidence.depends) and not args.partial:
        raise UserError(evidence.refusal())
    if evidence.gaps:
        print(f"warning: {gaps_line(evidence.gaps, evidence.total)}" + (
            "; judged on the complete pairs only (--partial)" if any(left_out) else "; no claim depends on them"),
              file=sys.stderr)
    runs = evidence.complete()
    if args.plan:  # a grid raised after a look: its verdicts are not the pooled test the counts are for
        print(plan_table(plan(claims, runs, tuning, args.power), args.power, raised=raised is not None))
        return 0
    judgements = judge_grid(claims, runs, tuning, raised)
    print(table(judgements, left_out))
    written = write_claims(judgements, folder, left_out, Path(args.claims) if args.claims else None, runs)
    print(f"written: {written}")
    return 0


def cmd_check_resume(args: argparse.Namespace) -> int:
    from fedaccel.launch import CheckStopped, check_resume
    from fedaccel.runs.config import load_config

    try:
        found = check_resume(load_config(args.config, args.set), args.after)
    except CheckStopped as stopped:
        print(stopped, file=sys.stderr)
        return 130
    said = f"stopped after round {found.after} of {found.rounds} and resumed in a new process:"
    if found.same:
        print(f"{said} the same numbers (final models' largest difference {found.model_difference:.3g})")
        return 0
    where = ("" if found.first_row_difference is None else
             "; first at round {}: {} {!r} whole, {!r} resumed".format(*found.first_row_difference))
    print(f"{said} the numbers differ (final models' largest difference {found.model_difference:.3g}{where}): the "
          "method keeps state its checkpoint does not hold (a closure, an attribute of a part, a module's global, "
          "a state changed in place after a stage returned it), so a resume and Flower's clients lose it; keep it "
          "in the states its stages return (docs/your-method.md)")
    return 1


def cmd_split_report(args: argparse.Namespace) -> int:
    from fedaccel.data.splits import format_report, label_counts, plot_heatmap
    from fedaccel.runs.config import load_config
    from fedaccel.runs.names import method_name
    from fedaccel.runs.setup import build_partition

    config = load_config(args.config, args.set)
    check_output_folder(Path(args.out))
    check_png_output(args.out, args.force)  # before the data are read
    dataset, partition = build_partition(config)
    counts = label_counts(partition, dataset.y_train.numpy(), dataset.num_classes)
    print(format_report(counts))
    # the split with the options the config spells (dirichlet alpha=0.3), as a method is named
    title = f"{config.data.dataset}, split {method_name(config.data.split)}, {len(partition)} clients"
    print(f"heat map: {plot_heatmap(counts, args.out, title=title, force=args.force)}")
    return 0


def cmd_reproduce(args: argparse.Namespace) -> int:
    from fedaccel.reproductions.reproduce import ExperimentsFailed, plan, reproduce

    if args.plan:
        if args.render_only:  # the plan reads the committed data and runs nothing
            raise UserError("--plan runs and draws nothing: leave out --render-only, or --plan")
        print(plan(args.paper, args.scale, only=args.only))
        return 0
    try:
        report = reproduce(args.paper, args.scale, only=args.only, progress=False if args.no_progress else None,
                           workers=args.workers, ray=ray_options(args), render_only=args.render_only)
    except ExperimentsFailed as exc:  # as a grid with failed cells: the rest ran, exit status 1
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"report: {report}")
    return 0


def cmd_algorithms(args: argparse.Namespace) -> int:
    from fedaccel.algorithms.registry import listing

    rows = listing()
    width = max(len(name) for name, _ in rows)
    for name, what in rows:
        print(f"{name:<{width}}  {what}")
    return 0


def cmd_data(args: argparse.Namespace) -> int:
    from fedaccel.data import available_datasets
    from fedaccel.data.embedded import install_fashion_mnist

    if args.data_command == "get":
        from fedaccel.data import get_dataset

        for name in args.names:
            folder, downloaded = get_dataset(name, args.to, force=args.force, progress=False if args.quiet else None)
            print(f"{name}: {'downloaded into' if downloaded else 'already in'} {folder}")
        return 0
    if args.install:
        print(f"Fashion-MNIST installed in {install_fashion_mnist()}")
    rows = available_datasets()
    width = max(len(name) for name, _, _ in rows)
    for name, status, where in rows:
        print(f"{name:<{width}}  {status:<9}  {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
