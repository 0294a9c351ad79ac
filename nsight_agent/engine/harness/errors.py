"""The error raised when a user's kernel source fails before or while it is measured."""

from __future__ import annotations

from typing import Any, Literal

from nsight_agent.errors import HarnessError

Stage = Literal["import", "setup", "compile", "entry", "check"]

_HINTS: dict[str, str] = {
    "import": "Fix the Python source so that it imports: the line shown is in your source.",
    "setup": "setup(**config, device) raised: check it builds the inputs of every config.",
    "compile": "Fix the CUDA C++ source at the line shown (the compiler's message is above).",
    "entry": "The entry point raised on the inputs from setup: fix it at the line shown.",
    "check": "The outputs are malformed (not tensors, wrong shape or dtype, NaN/Inf, aliasing "
    "inputs): fix the entry so it returns the same outputs as the baseline.",
}


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
        self.detail = message  # unformatted: what to_dict() writes and from_json() reads back
        self.line = line
        self.file = file
        self.traceback = traceback
        self.variant = variant
        self.config_index = config_index
        where = f" ({file or 'source'} line {line})" if line is not None else ""
        who = f" [variant {variant!r}, config #{config_index}]" if variant is not None else ""
        super().__init__(f"{stage} failed{where}{who}: {message}", _HINTS.get(stage, ""))

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
