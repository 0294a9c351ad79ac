"""The one way this package runs a subprocess: argv list, timeout, whole-group kill, poll hook.

Every child gets its own session (process group), so a kill reaches what it started too; a
SIGTERM to us while a child runs (main thread only) unwinds through the same kill. Output goes
to a file for long runs (no pipe to fill up), or is captured for short queries.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


class Terminated(BaseException):
    """SIGTERM arrived while a child ran: unwind so its process group is killed first."""


class RunTimeout(Exception):
    """The child ran past its limit and was killed (with its whole group)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"ran past {seconds:.0f} s")
        self.seconds = seconds


@dataclass(frozen=True)
class Finished:
    returncode: int
    seconds: float


@dataclass(frozen=True)
class Captured:
    returncode: int
    stdout: str
    stderr: str
    seconds: float


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """A child in its own session would not get our SIGTERM: turn the signal into an
    exception (main thread only; signals go nowhere else) and kill the group on the way out."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def kill_group(proc: subprocess.Popen[bytes] | subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def run_to_file(
    argv: Sequence[str],
    *,
    output_path: Path,
    timeout: float,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    poll: Callable[[], None] | None = None,
    poll_interval: float = 0.5,
) -> Finished:
    """Run ``argv`` with stdout+stderr in ``output_path``; raise ``RunTimeout`` past ``timeout``.

    ``poll`` is called while waiting (progress); an exception it raises, such as a
    cancellation, kills the group the same way a timeout does and propagates.
    """
    start = time.monotonic()
    with open(output_path, "wb") as out, _sigterm_raises():
        proc = subprocess.Popen(
            list(argv),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            start_new_session=True,
        )
        try:
            while True:
                try:
                    rc = proc.wait(timeout=poll_interval)
                    break
                except subprocess.TimeoutExpired:
                    if poll is not None:
                        poll()
                    if time.monotonic() - start > timeout:
                        raise RunTimeout(timeout) from None
        except BaseException:
            kill_group(proc)
            raise
    return Finished(rc, time.monotonic() - start)


def run_capture(
    argv: Sequence[str],
    *,
    timeout: float,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Captured:
    """Run a short command and capture its text output; raise ``RunTimeout`` past ``timeout``.

    Raises OSError when the program cannot be started.
    """
    start = time.monotonic()
    with (
        _sigterm_raises(),
        subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            start_new_session=True,
        ) as proc,
    ):
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            raise RunTimeout(timeout) from None
        except BaseException:
            kill_group(proc)
            raise
    return Captured(proc.returncode, out, err, time.monotonic() - start)
