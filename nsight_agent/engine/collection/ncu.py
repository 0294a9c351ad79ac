"""ncu itself: where it is, and one run of it: a program launched under ncu (the cold
collection path), its outcome checked (``ncu_log.py``), under the GPU's profiler lock, and tried
again while a profiler outside that lock holds the counters.

The argv is a list (``ncu_args.py``); the profiled program writes its output to a file in the
run directory, not a pipe; a wall-clock limit kills the whole process group.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from nsight_agent.engine import process
from nsight_agent.engine.collection import gpu_lock
from nsight_agent.engine.collection.ncu_args import NcuOptions, build_argv
from nsight_agent.engine.collection.ncu_log import NcuRun, Suggest, check, timeout_error
from nsight_agent.engine.store.run_files import RunFiles
from nsight_agent.errors import InvalidRequestError, NcuNotFoundError, ProfilerBusyError

logger = logging.getLogger(__name__)

# Pauses before the second and third attempt when a profiler outside our GPU lock holds the
# counters; each attempt reruns the program.
BUSY_PAUSES_S = (2.0, 5.0)


def find_ncu() -> str:
    """Path of the ncu executable: $NCU, then PATH, then the usual CUDA install places."""
    candidates = [os.environ.get("NCU", ""), shutil.which("ncu") or ""]
    candidates += sorted(map(str, Path("/opt/nvidia/nsight-compute").glob("*/ncu")), reverse=True)
    candidates += ["/usr/local/cuda/bin/ncu"]
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise NcuNotFoundError(
        "Nsight Compute (ncu) was not found on PATH, in $NCU, or under /opt/nvidia/nsight-compute.",
        "Install Nsight Compute (it ships with the CUDA toolkit) and put `ncu` on PATH, or set "
        "NCU=/path/to/ncu. Reports (.ncu-rep) can still be read without it.",
    )


def run(
    argv: list[str],
    *,
    files: RunFiles,
    timeout: float,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    poll: Callable[[], None] | None = None,
    poll_interval: float = 0.5,
    tag: str | None = None,
) -> NcuRun:
    """Run ncu through the process runner; a timeout becomes ``CollectionTimeoutError``.

    ``tag`` names the run in the children's environment marker (see ``process``)."""
    try:
        done = process.run_to_file(
            argv,
            output_path=files.program_output,
            timeout=timeout,
            cwd=cwd,
            env=env,
            poll=poll,
            poll_interval=poll_interval,
            tag=tag,
        )
    except process.RunTimeout:
        raise timeout_error(timeout, files) from None
    return NcuRun(argv, done.returncode, files, done.seconds)


@dataclass(frozen=True)
class Invocation:
    """One profiled run under ncu, cold or through a pre-launched target: what it collects,
    the files it leaves (``files``: the report, the ncu log, the program's output and the
    traceback it writes when it fails), its time limit and its hooks."""

    options: NcuOptions
    files: RunFiles
    timeout: float
    poll: Callable[[], None] | None = None  # progress; a cancel raises there
    suggest: Suggest | None = None  # close matches for a metric name ncu rejected (catalog)
    tag: str | None = None  # names the run in the children's marker (``process``)

    def __post_init__(self) -> None:
        if self.files.report.suffix != ".ncu-rep":
            raise InvalidRequestError(f"report path must end in .ncu-rep: {self.files.report}")

    @property
    def report_base(self) -> Path:
        """The report's path as ncu's ``--export`` takes it: without the suffix."""
        return self.files.report.with_suffix("")

    def check(self, result: NcuRun) -> None:
        """``check`` the run, with the traceback the program recorded itself, if any."""
        error = self.files.error
        program_error = error.read_text(errors="replace") if error.exists() else ""
        check(result, program_error=program_error, suggest=self.suggest)


def profile_cold(
    target: Sequence[str],
    inv: Invocation,
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    forget: Callable[[], None] | None = None,
) -> NcuRun:
    """Launch ``target`` under ncu once and check the outcome (``inv.check``): the cold
    collection path, where ``inv`` says what to collect and where the files go.

    The run holds its GPUs' profiler lock (``gpu_lock``); when a profiler outside that lock
    held the counters, it is tried again after ``forget`` removed what the failed attempt's
    program left (its progress and manifest would be read as the next attempt's).
    """
    argv = build_argv(find_ncu(), inv.options, inv.report_base, inv.files.ncu_log, target)
    env = env if env is not None else process.child_env()
    keys = gpu_lock.gpu_keys(env.get("CUDA_VISIBLE_DEVICES"))
    waited = 0.0
    start = time.monotonic()
    for attempt, pause in enumerate((*BUSY_PAUSES_S, None), start=1):
        with gpu_lock.held(
            keys, tag=inv.tag or "ncu", timeout=inv.timeout, poll=inv.poll, on_wait=logger.info
        ) as w:
            waited += w
            result = run(
                argv,
                files=inv.files,
                timeout=inv.timeout,
                cwd=cwd,
                env=env,
                poll=inv.poll,
                tag=inv.tag,
            )
        result.waited_s, result.attempts = waited, attempt
        try:
            inv.check(result)
        except ProfilerBusyError as err:
            if pause is None:
                raise ProfilerBusyError(
                    f"{err.message} Tried {attempt} times over {time.monotonic() - start:.0f} s.",
                    err.hint,
                ) from err
            logger.warning("GPU profiler busy (attempt %d): trying again in %.0f s", attempt, pause)
            _pause(pause, inv.poll)
            inv.files.error.unlink(missing_ok=True)
            if forget is not None:
                forget()
            continue
        return result
    raise AssertionError("unreachable: the last attempt returns or raises")


def _pause(seconds: float, poll: Callable[[], None] | None) -> None:
    """Sleep ``seconds``, calling ``poll`` (a cancel raises there) every 0.1 s."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if poll is not None:
            poll()
        time.sleep(min(0.1, max(0.0, end - time.monotonic())))
