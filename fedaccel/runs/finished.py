"""Whether a run folder holds a finished run, and what to say of it: nothing to resume, and how to run more rounds."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from fedaccel.errors import UserError
from fedaccel.runs.config import Config
from fedaccel.runs.folder import CLIENT_STATES, DIAGNOSTICS, METRICS
from fedaccel.runs.rows import read_diagnostics_rows, read_json, read_rows


def said_finished(path: Path, config: Config) -> bool:
    """Whether the run in ``path`` (of ``config``) is finished, said in one line where it is: nothing to resume.
    A simulation's client states that a kill as it ended left behind are removed (a finished run needs none)."""
    if not finished(path, config.train.rounds):
        return False
    states = path / CLIENT_STATES
    left = states.is_dir() and not states.is_symlink()
    if left:
        from fedaccel.runs.lock import lock_run_dir

        with lock_run_dir(path):  # a write: the folder's one writer (only here: a finished folder may be read-only)
            shutil.rmtree(states, ignore_errors=True)
    changed = ("its clients' states, left by a stop as it ended, were removed" if left else "nothing was changed")
    print(f"{path} is already finished (round {config.train.rounds} of {config.train.rounds}): "
          f"nothing to resume, {changed}; {more_rounds(path, config.run.runtime)}", file=sys.stderr)
    return True


def finished(path: Path, rounds: int) -> bool:
    """Whether the run in ``path`` says it finished its ``rounds`` and its last metrics row is that
    round (a run whose last row was cut short is resumed, not called finished)."""
    try:
        summary = read_json(path / "summary.json") if (path / "summary.json").is_file() else None
        rows, torn = read_rows(path / METRICS, last_round=rounds)
        read_diagnostics_rows(path / DIAGNOSTICS, last_round=rounds)
    except UserError:  # damage: resume says what it is, or repairs what it can
        return False
    return (isinstance(summary, dict) and summary.get("finished") is True and summary.get("rounds") == rounds
            and not torn and bool(rows) and rows[-1]["round"] == rounds)


def more_rounds(path: Path, runtime: str | None = None) -> str:
    """What to do for more rounds than the run in ``path`` has: its rounds are fixed when it starts (a schedule, an
    evaluation rhythm may depend on them), so a longer run is a new one from its config (``runtime``: its
    ``run.runtime``; a deployed run's config is deployed again)."""
    import shlex

    deployed = runtime == "flower-deployment"
    return (f"for more rounds, run its config again into a new folder: `fedaccel {'deploy' if deployed else 'run'} "
            f"{shlex.quote(str(Path(path) / 'config.yaml'))} --set train.rounds=N`"
            + (" (with `--prepare --tls DIR` where its SuperNodes run on other hosts)" if deployed else ""))
