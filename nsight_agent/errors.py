"""Errors a user (or an agent) can act on: each says what went wrong and what to do next."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class NsightAgentError(Exception):
    """Base of every error nsight-agent raises on purpose.

    ``hint`` is the next step for the reader; ``str(err)`` carries both.
    """

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__()
        self.reword(message, hint)

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt without __init__, whose signature varies by class (UnknownMetricError takes
        # the metric): pickle would call it with the one message argument and fail.
        return (_rebuilt, (type(self), self.args, dict(vars(self))))

    def reword(self, message: str, hint: str = "") -> None:
        """Set the message and the hint, and ``str(err)`` from them (a caller adding what it
        knows: the run's id, an estimate)."""
        self.message, self.hint = message, hint
        self.args = (f"{message}\nHint: {hint}" if hint else message,)


def _rebuilt(
    cls: type[NsightAgentError], args: tuple[Any, ...], state: dict[str, Any]
) -> NsightAgentError:
    err = cls.__new__(cls)
    err.args = args
    vars(err).update(state)
    return err


class InvalidRequestError(NsightAgentError, ValueError):
    """An argument or request field is malformed (bad option value, empty configs, ...)."""


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a request, found before anything ran (``service/validate.py``).

    ``code`` names the kind (``syntax``, ``missing_entry``, ``unknown_metric``, ...), ``where``
    the part of the request (``source``, ``variant 'new' source``, a file name, ``metrics``,
    ``options.clock_control``), ``line`` the line in that source when there is one.
    ``variant`` is set only for a problem in a candidate's own source: it costs that
    candidate alone (dropped with verdict ``error`` at stage ``import``), not the request."""

    code: str
    where: str
    message: str
    line: int | None = None
    variant: str | None = None
    hint: str = ""

    def text(self) -> str:
        """``where, line N: message`` (the line left out where there is none)."""
        line = f", line {self.line}" if self.line is not None else ""
        return f"{self.where}{line}: {self.message}"


KERNEL_PROBLEMS = frozenset(
    {"syntax", "missing_setup", "missing_entry", "kernelbench_shape", "missing_cuda_source"}
)
"""Problem codes of the kernel source itself; every other code is the caller's usage (a
field, a name, an option, a file that is not Python)."""


class RequestRejected(InvalidRequestError):
    """A request refused before anything ran: every problem found at once (``problems``),
    listed one a line in the message, with what to do in the hint."""

    @property
    def usage(self) -> bool:
        """Some problem is the caller's usage, not the kernel source's (the command line
        exits 2 then, 1 for a broken kernel alone)."""
        return any(p.code not in KERNEL_PROBLEMS for p in self.problems)

    @property
    def candidates_only(self) -> bool:
        """Every problem is a candidate's own source's: each would have dropped that
        candidate alone, and none was left to measure beside the baseline."""
        return bool(self.problems) and all(p.variant for p in self.problems)

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = list(problems)
        count = len(self.problems)
        head = f"The request has {count} problem{'s' if count != 1 else ''}; nothing was run:"
        lines = [head, *(f"- {p.text()}" for p in self.problems)]
        hints = list(dict.fromkeys(p.hint for p in self.problems if p.hint))
        super().__init__("\n".join(lines), " ".join(hints) or "Fix each problem listed.")


class NcuNotFoundError(NsightAgentError):
    """The ``ncu`` executable is not installed or not on PATH."""


class CounterPermissionError(NsightAgentError):
    """ncu may not read the GPU performance counters (ERR_NVGPUCTRPERM)."""


class UnknownMetricError(NsightAgentError, ValueError):
    """A requested metric does not exist for this GPU."""

    def __init__(self, metric: str, suggestions: list[str], message: str = "") -> None:
        self.metric = metric
        self.suggestions = suggestions
        close = f" Close matches: {', '.join(suggestions)}." if suggestions else ""
        text = message or f"Unknown metric {metric!r}."
        super().__init__(
            text if not close or "Close matches" in text else text.rstrip() + close,
            "List valid names with `ncu --query-metrics` (or the query_metrics tool); "
            "add a rollup suffix such as .sum, .avg or .max where the base name has none.",
        )


class NoKernelsProfiledError(NsightAgentError):
    """ncu ran the program but profiled no kernel inside the measured ranges."""


class ProfiledProcessError(NsightAgentError):
    """The program under ncu exited with an error."""

    def __init__(self, returncode: int, stderr_tail: str, message: str = "") -> None:
        self.returncode = returncode
        self.stderr_tail = stderr_tail
        super().__init__(
            message or f"The profiled program failed with exit code {returncode}:\n{stderr_tail}",
            "Fix the error shown above; run the code once without the profiler to reproduce it.",
        )


class CollectionTimeoutError(NsightAgentError):
    """The profiled program ran past its wall-clock limit and was killed. ``profiled``: the
    kernels ncu had profiled by then (its log), None where unknown."""

    def __init__(
        self, message: str, hint: str = "", limit_s: float = 0.0, profiled: int | None = None
    ) -> None:
        super().__init__(message, hint)
        self.limit_s, self.profiled = limit_s, profiled


class NcuError(NsightAgentError):
    """ncu itself reported an error not covered by a more specific class."""


class KernelProfileFailedError(NcuError):
    """ncu failed on a kernel and ended the program, which reported no error of its own."""


class ProfilerBusyError(NsightAgentError):
    """Another profiler held the GPU's performance counters: not the program's fault."""


class ExtractionError(NsightAgentError):
    """The report could not be turned into rows (missing, unreadable or inconsistent)."""


class MultipleKernelsError(ExtractionError, RuntimeError):
    """An annotation launched several kernels and no way to combine them was given.

    Also a ``RuntimeError``, the class nsight-python raises for the same case."""


class KernelCountMismatchError(ExtractionError, RuntimeError):
    """The number of kernels in one annotation changed between runs.

    Also a ``RuntimeError``, the class nsight-python raises for the same case."""


class HarnessError(NsightAgentError):
    """The user's kernel source failed before profiling (syntax, setup, compile, shape)."""


class CoolingTimeoutError(NsightAgentError):
    """The GPU did not cool to the requested thermal headroom in time."""


class RunStorageError(NsightAgentError):
    """The runs folder cannot hold a run's files (not a folder, not writable, disk full)."""


class RunsRootNotAFolderError(RunStorageError):
    """The runs root (or a folder above it) is a file, not a folder."""


class RunsFolderNotWritableError(RunStorageError):
    """The runs folder may not be written by this user, or is on a read-only file system."""


class StorageFullError(RunStorageError):
    """The disk (or quota) holding the runs folder is full."""


class RunIdCollisionError(RunStorageError):
    """No free run id was found after several tries (another process is creating the same)."""


class RunCancelledError(NsightAgentError):
    """The run was cancelled (the caller cancelled, disconnected or the server stopped)."""


class RunInterruptedError(RunCancelledError):
    """The run was ended by the server's own end (a signal, the client's exit), not by its
    caller or its source: ``ended_by`` says who; its processes died of our kill."""

    def __init__(self, ended_by: str) -> None:
        self.ended_by = ended_by or "the server's end"
        super().__init__(
            f"The run was interrupted by {self.ended_by}: nsight-agent killed its processes "
            "(nothing points at the kernel source).",
            "Call again once the server runs again; the run's folder keeps what it left.",
        )


class NotAReportError(ExtractionError):
    """The file is not an Nsight Compute report (it lacks the .ncu-rep header)."""


class TruncatedReportError(ExtractionError):
    """The file starts as an Nsight Compute report but ends early (empty or cut short)."""


# What Python says of a setup() called without its parameters: the caller gave no configs for
# them (a usage error, which the command line exits 2 for).
MISSING_CONFIG = "setup() missing"
