"""What one ncu run left behind (``NcuRun``), and what its log says went wrong: ncu's failures
as specific errors, each with what to do (missing counter permission, a busy profiler, an
unknown metric, a kernel ncu failed on, the program's own error, a run cut by its limit).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from nsight_agent.engine.store.run_files import RunFiles
from nsight_agent.errors import (
    CollectionTimeoutError,
    CounterPermissionError,
    KernelProfileFailedError,
    NcuError,
    NoKernelsProfiledError,
    ProfiledProcessError,
    ProfilerBusyError,
    UnknownMetricError,
)

Suggest = Callable[[str], list[str]]

# ncu's words when another profiling session holds the GPU's counters (ncu 2025.3.1, H200,
# two ncu at once); it then ends the program with exit code 9.
BUSY = re.compile(r"driver resource was unavailable", re.IGNORECASE)
BUSY_HINT = (
    "Nothing in your program failed. Another profiler held this GPU's performance counters: "
    "another ncu, DCGM's profiling module (pause it with `dcgmi profile --pause`), or Nsight "
    "Systems sampling GPU metrics. Stop it, or run again when it is done."
)
# ncu's words when it could not profile a kernel; it then shuts the program down ("Trying to
# shutdown target application") and the program's exit code is 9, with nothing of its own said.
PROFILE_FAILED = re.compile(r"^Failed to profile (.*?)(?: in process \d+)?$")
PROFILE_FAILED_HINT = (
    "Your program reported no error: ncu failed on this kernel and ended it. Run the call "
    "again; if it fails again, look for another process's work on this GPU (a kernel that "
    "faulted or hangs there, `nvidia-smi`), then run `nsight-agent doctor`, and try fewer "
    "sections or metrics."
)
PERMISSION_HINT = (
    "ncu needs access to the GPU performance counters. Either run as root (or with sudo), or "
    "allow all users once: put `options nvidia NVreg_RestrictProfilingToAdminUsers=0` in "
    "/etc/modprobe.d/nvidia-profiling.conf and reboot (see "
    "https://developer.nvidia.com/ERR_NVGPUCTRPERM). Timing without counters needs no ncu: "
    "time the kernel with CUDA events instead."
)


@dataclass
class NcuRun:
    """What one ncu invocation left behind."""

    argv: list[str]
    returncode: int
    files: RunFiles
    seconds: float
    waited_s: float = 0.0  # waiting for the GPU's profiler lock (another process held it)
    attempts: int = 1

    def ncu_log(self) -> str:
        log = self.files.ncu_log
        return log.read_text(errors="replace") if log.exists() else ""

    def program_output(self) -> str:
        output = self.files.program_output
        return output.read_text(errors="replace") if output.exists() else ""


# One line per kernel ncu profiled: ==PROF== Profiling "name" - 12: 0%....50%....100% - 9 passes
PROFILED = re.compile(r'^==PROF== Profiling ".*" - \d+: .* - (\d+) pass', re.MULTILINE)


def timeout_error(timeout: float, files: RunFiles) -> CollectionTimeoutError:
    """The limit's error, saying how far ncu got (its log's profiled kernels and passes)."""
    try:
        passes = [int(p) for p in PROFILED.findall(files.ncu_log.read_text(errors="replace"))]
    except OSError:
        passes = []
    most = max(passes, default=0)
    got = (
        f", after ncu had profiled {len(passes)} kernel(s) ({most} replay "
        f"pass{'es' if most != 1 else ''} each at most)"
        if passes
        else ""
    )
    return CollectionTimeoutError(
        f"The profiled program ran past its {timeout:.0f} s limit and was killed{got}.",
        "A kernel may hang, or the sweep is too large for the limit: raise "
        "timeout, profile fewer configs/runs/sections, or check the program "
        f"alone. Its output so far is in {files.program_output}.",
        limit_s=timeout,
        profiled=len(passes) if passes else None,
    )


ERROR_LINE = re.compile(r"^==ERROR==\s*(.*)$", re.MULTILINE)
_METRIC_ERRORS = (
    # A name without a rollup suffix is looked up as "regex:^NAME\.(sum|min|...)$" (ncu 2025.3).
    re.compile(
        r"[Ff]ailed to find metric (?:regex:\^?)?['\"]?([A-Za-z0-9_:\-]+(?:\.[A-Za-z0-9_]+)*)"
    ),
    re.compile(r"[Mm]etric ['\"]?([A-Za-z0-9_:.\-]+)['\"]? (?:is )?(?:not found|invalid|unknown)"),
    re.compile(r"[Ii]nvalid metric(?: name)?:? ['\"]?([A-Za-z0-9_:.\-]+)"),
)


def check(run_result: NcuRun, *, program_error: str = "", suggest: Suggest | None = None) -> None:
    """Raise the specific error for a failed or empty ncu run; return quietly on success.

    ``program_error`` is the traceback the profiled program recorded itself, if any.
    """
    log = run_result.ncu_log()
    errors = ERROR_LINE.findall(log)
    text = "\n".join(errors)
    if "ERR_NVGPUCTRPERM" in log:
        raise CounterPermissionError(
            "ncu is not permitted to read the GPU performance counters (ERR_NVGPUCTRPERM).",
            PERMISSION_HINT,
        )
    if BUSY.search(text):
        raise ProfilerBusyError(
            "ncu could not profile: another profiling session held the GPU's performance "
            f"counters (ncu: {_busy_line(errors)}).",
            BUSY_HINT,
        )
    for pattern in _METRIC_ERRORS:
        m = pattern.search(text)
        if m:
            raise UnknownMetricError(m.group(1), suggest(m.group(1)) if suggest else [], text)
    # ncu's own complaints, without its line about the program's exit code
    own = [e for e in errors if "application returned an error" not in e]
    failed = [m.group(1) for m in map(PROFILE_FAILED.match, errors) if m]
    if failed and not program_error:
        raise KernelProfileFailedError(
            f"ncu could not profile {failed[0]} and ended the program (exit code "
            f"{run_result.returncode}); ncu said: " + " / ".join(own[:6]),
            PROFILE_FAILED_HINT,
        )
    if (
        program_error
        or "application returned an error" in text
        or (run_result.returncode != 0 and not errors)
    ):
        tail = program_error or _tail(run_result.program_output(), 40)
        # beside the program's: a program that ncu shut down prints nothing itself
        if own:
            tail = f"{tail}\nncu said: " + "\n".join(own[:6])
        raise ProfiledProcessError(run_result.returncode, tail.strip())
    if run_result.returncode != 0 or errors:
        raise NcuError(
            f"ncu failed (exit code {run_result.returncode}): {text or _tail(log, 20)}",
            f"See the ncu log {run_result.files.ncu_log} and the program output "
            f"{run_result.files.program_output}.",
        )
    if "No kernels were profiled" in log or "No ranges were profiled" in log:
        raise NoKernelsProfiledError(
            "ncu ran the program but profiled no kernel inside an annotated range.",
            "Wrap the GPU work to measure in `with nsight_agent.annotate(name):`; check that it "
            "launches CUDA kernels (tensors on a CUDA device, not the CPU) and that "
            "ignore_kernel_list does not drop them all.",
        )
    if not run_result.files.report.exists():
        raise NcuError(
            f"ncu exited cleanly but wrote no report at {run_result.files.report}.",
            f"See the ncu log {run_result.files.ncu_log}.",
        )


def _busy_line(errors: list[str]) -> str:
    return next((e for e in errors if BUSY.search(e)), "").strip().rstrip(".")


def _tail(text: str, lines: int) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])
