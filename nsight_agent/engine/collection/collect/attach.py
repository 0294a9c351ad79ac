"""The attach: hand a pre-launched target its job, attach ncu, check the outcome as a cold
run's (``attached.py`` is the way of collecting that takes a target, and falls back cold).
The target waits under ``ncu --mode launch`` (``worker/targets.py``); the run leaves the same
report, log, program output and errors as a cold one.

ncu 2025.3.1 (seen on the H200): an attach finds a target only once the target is suspended
at its first CUDA call; before that it fails after ncu's own start ("No attachable process
found"), so it is tried again until it connects, the target ends, or the run's time is up.
Connected, it profiles until the target exits, and records no NVTX state: the harness runs
with call markers on (``harness/call_markers.py``), each measured call and its markers inside
a profiler range, which the attach keeps to (``--profile-from-start off``: no set-up, check
or warm-up kernel is profiled, so jobs with sections are served too), and the report is read
by the markers, checked against the pre-flight's kernel counts. A failure of the attach itself, not of
the program, the metric names or the counters, or a report the markers cannot tie to the
calls, raises ``AttachFailed``: the job then launches cold and its answer says why. The target is
single use and killed (its process group) however the run ends.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from nsight_agent.engine import process
from nsight_agent.engine.collection import call_markers, extract, gpu_lock, ncu
from nsight_agent.engine.collection.ncu_args import attach_argv
from nsight_agent.engine.collection.ncu_log import ERROR_LINE, NcuRun, timeout_error
from nsight_agent.engine.harness.call_markers import ENV as MARKERS_ENV
from nsight_agent.engine.store.run_files import RunFiles
from nsight_agent.errors import NcuError

NOT_FOUND = re.compile(r"No attachable process|No processes found")
RETRY_S = 0.1  # between attaches that found no target yet (each costs ncu's own start)


class Prelaunched(Protocol):
    """One target waiting under ``ncu --mode launch`` for its one job (``worker/targets.py``)."""

    @property
    def port(self) -> int: ...

    def hand(
        self, run_dir: Path, argv: Sequence[str], output: Path, env: dict[str, str] | None = None
    ) -> None:
        """Give the target its job: run ``argv`` (harness.py ...) in ``run_dir``, with ``env``
        added to its environment."""

    def ended(self) -> bool:
        """Whether the target (and its launcher) exited."""

    def exit_status(self) -> int | None:
        """The harness's exit status once the target ended (None: unknown yet)."""

    def kill(self) -> None:
        """Kill the target's process group; idempotent."""


class TargetSource(Protocol):
    """Where a job finds a ready target: one GPU slot's pool."""

    def take(self) -> Prelaunched | None:
        """A ready target, now the caller's, or None."""

    def any_ready(self) -> bool:
        """Whether ``take`` would find a target now (one job per slot at a time: it will)."""

    def why_none(self) -> str:
        """Why ``take`` found none (starting, off and why)."""

    def turn_off(self, why: str) -> None:
        """Serve no more jobs: what the targets give cannot be used here."""


class AttachFailed(Exception):
    """ncu could not profile through the target; the message says why (the caller goes cold).
    ``lasting``: every attach here would fail the same way (the pool turns off)."""

    def __init__(self, message: str, lasting: bool = False) -> None:
        super().__init__(message)
        self.lasting = lasting


def profile_prelaunched(
    target: Prelaunched,
    inv: ncu.Invocation,
    *,
    argv: Sequence[str],
    run_dir: Path,
    expected: call_markers.KernelCounts | None = None,
) -> NcuRun:
    """``ncu.profile_cold``'s run and checks, through ``target`` running ``argv`` in
    ``run_dir`` with call markers on: the same report, log, program output and errors.
    Raises ``AttachFailed`` when the attach itself failed or its report cannot be tied to the
    harness's calls (``expected``: the pre-flight's kernels per call, by variant and config)."""
    command = attach_argv(ncu.find_ncu(), inv.options, target.port, inv.report_base)
    keys = gpu_lock.gpu_keys(process.child_env().get("CUDA_VISIBLE_DEVICES"))
    try:
        with gpu_lock.held(keys, tag=inv.tag or "attach", timeout=inv.timeout, poll=inv.poll):
            start = time.monotonic()
            target.hand(run_dir, argv, inv.files.program_output, {MARKERS_ENV: "1"})
            attached = _attach(command, target, inv, start)
            if attached.returncode == 0:  # else the target may never end: it is killed below
                _wait_for_end(target, inv, start)
            status = target.exit_status()
    finally:
        target.kill()  # single use; also on a timeout, a cancel, an error
    process.cap_output(inv.files.program_output)
    log = _read(inv.files.ncu_log)
    if attached.returncode != 0 and not ERROR_LINE.search(log):
        raise AttachFailed(f"ncu --mode attach exited with status {attached.returncode}")
    # The attach's own status when it failed; else the harness's, as a cold ncu returns it.
    returncode = attached.returncode or (status if status is not None else 0)
    seconds = time.monotonic() - start
    result = NcuRun(command, returncode, inv.files, seconds)
    try:
        inv.check(result)
    except NcuError as err:  # ncu's own failure: the program, names and counters were fine
        raise AttachFailed(err.message.splitlines()[0][:200]) from err
    if returncode == 0:
        readable(inv.files, expected)
    return result


def readable(files: RunFiles, expected: call_markers.KernelCounts | None) -> None:
    """Raise ``AttachFailed`` unless the attached report can be read into rows: some kernel ran
    inside a harness call range, or the harness's call markers tie every kernel of the
    measured calls to its call with the pre-flight's kernel counts (``expected``)."""
    try:
        records = extract.read_actions(files.report, metrics=[])
        calls = extract.calls_from_manifest(json.loads(files.manifest.read_text()))
    except Exception:
        return  # an unreadable report or manifest: the extraction names it, as for a cold run
    if any(r.call is not None for r in records):
        return
    if not call_markers.present(records):
        raise AttachFailed(
            "the attached report records no NVTX call ranges and no call markers", lasting=True
        )
    try:
        call_markers.assign_calls(records, calls, expected)
    except call_markers.MarkerMismatch as err:
        raise AttachFailed(f"the call markers do not fit: {err}") from err


def _attach(
    argv: list[str], target: Prelaunched, inv: ncu.Invocation, start: float
) -> process.Finished:
    """Attach until ncu finds the target suspended at its first CUDA call."""
    while True:
        left = inv.timeout - (time.monotonic() - start)
        if left <= 0:
            raise timeout_error(inv.timeout, inv.files)
        try:
            done = process.run_to_file(
                argv, output_path=inv.files.ncu_log, timeout=left, poll=inv.poll, tag=inv.tag
            )
        except process.RunTimeout:
            raise timeout_error(inv.timeout, inv.files) from None
        if done.returncode == 0 or not NOT_FOUND.search(_read(inv.files.ncu_log)):
            return done
        if target.ended():
            raise AttachFailed("the target ended before ncu could attach (no CUDA call?)")
        if inv.poll is not None:
            inv.poll()
        time.sleep(RETRY_S)


def _wait_for_end(target: Prelaunched, inv: ncu.Invocation, start: float) -> None:
    """The attach ends with the target; wait for its launcher to exit too."""
    while not target.ended():
        if time.monotonic() - start > inv.timeout:
            raise timeout_error(inv.timeout, inv.files)
        if inv.poll is not None:
            inv.poll()
        time.sleep(0.02)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
