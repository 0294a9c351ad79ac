"""The one way this package runs a subprocess: argv list, timeout, whole-group kill, poll hook.

Every child gets its own session (process group), so a kill reaches what it started too; a
SIGTERM to us while a child runs (main thread only) unwinds through the same kill. Output goes
to a file for long runs (no pipe to fill up), or is captured for short queries.

Each child belongs to this process and dies with it (engine/children.py: the parent-death
signal, the environment marker). A child that dies once this process is ending died of our
kill: ``run_to_file`` raises ``RunInterruptedError`` naming who ends it, not the child's status.
Program output kept in a file is capped after the run: the head and the tail stay, and the
cut is stated in the file.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from nsight_agent.engine import bytecode, children, pinning
from nsight_agent.errors import RunInterruptedError

OUTPUT_HEAD = 256 * 1024
OUTPUT_TAIL = 256 * 1024


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


# --- Python children: their interpreter and environment --------------------------------------

# The folder that holds the nsight_agent package: child processes import it from there.
PACKAGE_ROOT = Path(__file__).resolve().parents[2]


def python_executable() -> str:
    """The interpreter a Python child (the profiled program, a worker) runs in: ours."""
    return sys.executable or "python3"


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """A Python child's environment: ours, this package importable, a bytecode cache."""
    env = dict(os.environ)
    bytecode.add_cache(env)
    parts = [str(PACKAGE_ROOT), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    env["PYTHONUNBUFFERED"] = "1"
    env.update(pinning.pinned_env())  # the executor's GPU for this job, when it pinned one
    env.update(extra or {})
    return env


# --- running ---------------------------------------------------------------------------------


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


def cap_output(path: Path, head: int = OUTPUT_HEAD, tail: int = OUTPUT_TAIL) -> bool:
    """Keep the first ``head`` and last ``tail`` bytes of a long output file, and say what was
    cut; return whether anything was."""
    try:
        size = path.stat().st_size
    except OSError:
        return False
    if size <= head + tail + 1024:
        return False
    with open(path, "rb") as f:
        first = f.read(head)
        f.seek(size - tail)
        last = f.read(tail)
    cut = size - head - tail
    note = (
        f"\n[... nsight-agent cut {cut} bytes of program output here: the output was {size} "
        f"bytes; the first {head} and the last {tail} are kept ...]\n"
    ).encode()
    tmp = path.with_name(path.name + ".cap")
    tmp.write_bytes(first + note + last)
    tmp.replace(path)
    return True


def run_to_file(
    argv: Sequence[str],
    *,
    output_path: Path,
    timeout: float,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    poll: Callable[[], None] | None = None,
    poll_interval: float = 0.5,
    tag: str | None = None,
    cap: bool = True,
) -> Finished:
    """Run ``argv`` with stdout+stderr in ``output_path``; raise ``RunTimeout`` past ``timeout``.

    ``poll`` is called while waiting (progress); an exception it raises, such as a
    cancellation, kills the group (and every process with the child's marker) the same way a
    timeout does and propagates. ``tag`` names the child in its marker (run id and stage).
    The output file is capped (head and tail kept) when the child is done, whatever the end.
    """
    start = time.monotonic()
    marker = children.new_marker(tag)
    try:
        with open(output_path, "wb") as out, _sigterm_raises():
            proc = subprocess.Popen(
                list(argv),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=cwd,
                env=children.marked_env(env, marker),
                start_new_session=True,
                preexec_fn=children.die_with_parent(os.getpid()),
            )
            with children.tracked(proc):
                try:
                    rc = _wait(proc, start, timeout, poll, poll_interval)
                except BaseException:
                    children.kill_group(proc, marker)
                    raise
                # whatever it left running in the background
                children.kill_marked(marker, exact=True)
                if children.ending() is not None:  # it died of our kill: not its own failure
                    raise RunInterruptedError(children.ending() or "")
    finally:
        if cap:
            cap_output(output_path)
    return Finished(rc, time.monotonic() - start)


def _wait(
    proc: subprocess.Popen[bytes],
    start: float,
    timeout: float,
    poll: Callable[[], None] | None,
    poll_interval: float,
) -> int:
    # Poll often at first (a cancel soon after the start is seen at once), then every
    # poll_interval.
    step = min(0.05, poll_interval)
    while True:
        try:
            return proc.wait(timeout=step)
        except subprocess.TimeoutExpired:
            if poll is not None:
                poll()
            if time.monotonic() - start > timeout:
                raise RunTimeout(timeout) from None
            step = min(step * 2, poll_interval)


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
    marker = children.new_marker("capture")
    with (
        _sigterm_raises(),
        subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd,
            env=children.marked_env(env, marker),
            start_new_session=True,
            preexec_fn=children.die_with_parent(os.getpid()),
        ) as proc,
        children.tracked(proc),
    ):
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            children.kill_group(proc, marker)
            raise RunTimeout(timeout) from None
        except BaseException:
            children.kill_group(proc, marker)
            raise
    return Captured(proc.returncode, out, err, time.monotonic() - start)
