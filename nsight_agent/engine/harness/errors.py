"""The error raised when a user's kernel source fails before or while it is measured."""

from __future__ import annotations

import re
from typing import Any, Literal

from nsight_agent.errors import MISSING_CONFIG, HarnessError

Stage = Literal["import", "setup", "compile", "entry", "check"]

_HINTS: dict[str, str] = {
    "import": "Fix the Python source so that it imports.",
    "setup": "setup(**config, device) raised: check it builds the inputs of every config.",
    "compile": "Fix the CUDA C++ source (the compiler's message is above).",
    "entry": "The entry point raised on the inputs from setup.",
    "check": "The outputs are malformed (not tensors, wrong shape or dtype, NaN/Inf, aliasing "
    "inputs): fix the entry so it returns the same outputs as the baseline.",
}
KERNELS_EXTRA = 'pip install ".[kernels]" in a clone of nsight-agent'
# (text in the message, hint): failures whose cause is not a line of the user's source.
DIED = "the harness died without an error report"
_CAUSE_HINTS: tuple[tuple[str, str], ...] = (
    (
        DIED,
        "No Python error was raised: the process ended in native code (a crash in a CUDA "
        "extension), by a signal (the OOM killer, a kill from another process, a GPU fault or "
        "reset) or by os._exit(). Run the source once without the profiler; if that works and "
        "a second call works too, something outside it (memory, another process on the GPU) "
        "ended it.",
    ),
    (
        MISSING_CONFIG,
        'setup() takes parameters that no config gave: pass them as configs (MCP: configs=[{"n": '
        "1024}]; CLI: --config n=1024, or --grid '{\"n\": [1024, 4096]}').",
    ),
    (
        "No module named 'torch'",
        f"PyTorch is not installed where the harness runs: {KERNELS_EXTRA} (or install torch "
        "for your CUDA version first, then that).",
    ),
    (
        "No module named 'triton'",
        f"Triton is not installed where the harness runs: {KERNELS_EXTRA}.",
    ),
    (
        "illegal memory access",
        "A kernel read or wrote out of bounds and the CUDA context is lost: check the grid, "
        "the masks and the index arithmetic (compute-sanitizer finds the access).",
    ),
    (
        "CUDA error",
        "A CUDA call failed inside the entry: run it once with CUDA_LAUNCH_BLOCKING=1 to see "
        "which launch.",
    ),
    (
        "launched no CUDA kernel",
        "Only kernel launches are profiled: a device-to-device copy (x.clone()) is a memcpy, "
        "and a cached result launches nothing; make the entry compute on the GPU every call.",
    ),
)


def hint_for(stage: str, message: str, line: int | None) -> str:
    """The next step: the cause's own hint when the message names one, else the stage's, and
    "at the line shown" only where a line is shown."""
    for needle, hint in _CAUSE_HINTS:
        if needle in message:
            return hint
    base = _HINTS.get(stage, "")
    if line is not None and base and stage != "check":
        return base + " The line shown is in your source."
    return base


_PREFIX = re.compile(r"^(import|setup|compile|entry|check) failed(?: \([^)]*\))?(?: \[[^\]]*\])?: ")


class SourceError(HarnessError):
    """A :class:`HarnessError` that says where: stage, and the line in the user's source."""

    def __init__(
        self,
        stage: str,
        message: str,
        *,
        line: int | None = None,
        file: str | None = None,
        traceback: str = "",
        variant: str | None = None,
        config_index: int | None = None,
    ) -> None:
        self.stage = stage
        # Unformatted (what to_dict() writes and from_json() reads back): a message that is
        # itself a formatted SourceError loses its prefix, so the answer says it once.
        while _PREFIX.match(message):
            message = _PREFIX.sub("", message, count=1)
        self.detail = message
        self.line = line
        self.file = file
        self.traceback = traceback
        self.variant = variant
        self.config_index = config_index
        where = f" ({file or 'source'} line {line})" if line is not None else ""
        config = f", config #{config_index}" if config_index is not None else ""
        who = f" [variant {variant!r}{config}]" if variant is not None else ""
        super().__init__(f"{stage} failed{where}{who}: {message}", hint_for(stage, message, line))

    def to_dict(self) -> dict[str, Any]:
        """The error file a harness writes (``runtime.write_error``); ``from_json`` reads it."""
        return {
            "stage": self.stage,
            "message": self.detail,
            "line": self.line,
            "file": self.file,
            "traceback": self.traceback,
            "variant": self.variant,
            "config_index": self.config_index,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SourceError:
        """Rebuild from the error file a harness writes (see ``runtime.write_error``)."""
        return cls(
            str(data.get("stage", "entry")),
            str(data.get("message", "unknown error")),
            line=data.get("line"),
            file=data.get("file"),
            traceback=str(data.get("traceback", "")),
            variant=data.get("variant"),
            config_index=data.get("config_index"),
        )
