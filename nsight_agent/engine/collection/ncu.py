"""Build the ncu command line, run it, and turn ncu's failures into specific errors.

The argv is a list (never a shell string); the profiled program writes its output to a
file in the run directory, not a pipe; a wall-clock limit kills the whole process group.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import get_args

from nsight_agent.annotation import NCU_NVTX_INCLUDE
from nsight_agent.engine import process
from nsight_agent.engine.collection import gpu_lock, launch_sampling
from nsight_agent.engine.store.run_files import RunFiles
from nsight_agent.errors import (
    CollectionTimeoutError,
    CounterPermissionError,
    InvalidRequestError,
    KernelProfileFailedError,
    NcuError,
    NcuNotFoundError,
    NoKernelsProfiledError,
    ProfiledProcessError,
    ProfilerBusyError,
    UnknownMetricError,
)
from nsight_agent.options import TIME_METRIC, CacheControl, ClockControl, ReplayMode

Suggest = Callable[[str], list[str]]

logger = logging.getLogger(__name__)

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
# Pauses before the second and third attempt when a profiler outside our GPU lock holds the
# counters; each attempt reruns the program.
BUSY_PAUSES_S = (2.0, 5.0)

PERMISSION_HINT = (
    "ncu needs access to the GPU performance counters. Either run as root (or with sudo), or "
    "allow all users once: put `options nvidia NVreg_RestrictProfilingToAdminUsers=0` in "
    "/etc/modprobe.d/nvidia-profiling.conf and reboot (see "
    "https://developer.nvidia.com/ERR_NVGPUCTRPERM). Timing without counters needs no ncu: "
    "time the kernel with CUDA events instead."
)


def check_choice(name: str, value: object, literal: object) -> None:
    """Re-check a Literal option at run time: type hints do not stop a wrong string."""
    choices = get_args(literal)
    if value not in choices:
        raise InvalidRequestError(
            f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}",
            f"Pass {name}={choices[0]!r} (the default) or another listed value.",
        )


@dataclass(frozen=True)
class NcuOptions:
    """What to collect and how: the part of a request that becomes ncu flags."""

    metrics: Sequence[str] = (TIME_METRIC,)
    sections: Sequence[str] = ()
    replay_mode: ReplayMode = "kernel"
    cache_control: CacheControl = "all"
    clock_control: ClockControl = "none"
    nvtx_include: Sequence[str] = (NCU_NVTX_INCLUDE,)
    extra_args: Sequence[str] = field(default_factory=tuple)
    sample_launches: bool = False  # one launch per launch configuration (launch_sampling.py)

    def __post_init__(self) -> None:
        check_choice("replay_mode", self.replay_mode, ReplayMode)
        check_choice("cache_control", self.cache_control, CacheControl)
        check_choice("clock_control", self.clock_control, ClockControl)
        if not self.metrics and not self.sections:
            raise InvalidRequestError(
                "no metrics and no sections requested",
                "Ask for at least one metric, e.g. gpu__time_duration.sum.",
            )
        for m in self.metrics:
            if not m or m.startswith("-") or "," in m or any(c.isspace() for c in m):
                raise InvalidRequestError(
                    f"malformed metric name {m!r}",
                    "Give one metric per list entry, without spaces, commas or leading dashes.",
                )


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


def build_argv(
    ncu: str, options: NcuOptions, report_base: Path, log_path: Path, target: Sequence[str]
) -> list[str]:
    """The exact ncu command line for one collection run."""
    argv = [ncu, "--force-overwrite", "--export", str(report_base), "--log-file", str(log_path)]
    argv += ["--print-summary", "none", "--target-processes", "all"]
    argv += nvtx_args(options.nvtx_include)
    return [*argv, *collection_args(options), *target]


def nvtx_args(nvtx_include: Sequence[str]) -> list[str]:
    """The NVTX filter: ``--nvtx`` and one ``--nvtx-include`` per expression."""
    return (["--nvtx"] if nvtx_include else []) + [
        a for e in nvtx_include for a in ("--nvtx-include", e)
    ]


def collection_args(options: NcuOptions) -> list[str]:
    """What to collect and how: replay, cache and clock control, metrics, sections."""
    argv = ["--replay-mode", options.replay_mode, "--cache-control", options.cache_control]
    argv += ["--clock-control", options.clock_control]
    if options.metrics:
        argv += ["--metrics", ",".join(options.metrics)]
    for section in options.sections:
        argv += ["--section", section]
    argv += list(launch_sampling.NCU_ARGS) if options.sample_launches else []
    return argv + list(options.extra_args)


# Pre-launched targets (worker/targets.py, collection/attach.py): the report, metrics and
# replay options go on the attach; each target listens on its own block of ports.
ATTACH_HOST = "127.0.0.1"


def launch_argv(ncu: str, port: int, nvtx: bool, target: Sequence[str]) -> list[str]:
    """``ncu --mode launch``: start ``target``, suspended at its first CUDA call until an
    attach on ``port`` connects; ``nvtx``: add --nvtx (the pool drops it where ncu refuses it)."""
    return [ncu, "--mode", "launch", "--port", str(port), *(["--nvtx"] if nvtx else []), *target]


def attach_argv(ncu: str, options: NcuOptions, port: int, report_base: Path) -> list[str]:
    """``ncu --mode attach``: profile the target on ``port`` until it exits, inside its
    profiler ranges only (one per measured call with its markers: harness/call_markers.py)."""
    head = [ncu, "--mode", "attach", "--hostname", ATTACH_HOST, "--port", str(port)]
    head += ["--profile-from-start", "off", "--force-overwrite", "--export", str(report_base)]
    return [*head, *collection_args(options)]


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
