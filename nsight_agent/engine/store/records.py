"""Typed records of what a run produced: the variants it dropped, the measurements it holds
suspect, and its files by role.

The harness writes the first two into its manifest as plain JSON (it runs in the profiled
process and imports nothing of the store); ``dropped_from`` and ``suspects_from`` read them
there, and the run's files store them back in the same bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer

DropVerdict = Literal["error", "timeout", "no_kernel", "incorrect", "suspect"]


class DroppedVariant(BaseModel):
    """A variant that failed alone and was not measured further (the others were): its
    verdict, the stage and message of the failure, and where it happened when known."""

    model_config = ConfigDict(frozen=True)

    verdict: DropVerdict
    stage: str  # import, setup, compile, entry, check; profile for an uneven kernel count
    message: str
    line: int | None = None  # in the user's source
    file: str | None = None
    variant: str | None = None  # the variant the error named (a shared module names its first)
    config_index: int | None = None
    reason: str | None = None  # the output check's reason (shape, dtype, structure, alias)

    @model_serializer(mode="wrap")
    def _as_given(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # The keys it was given and no others: an error's record keeps its null line and
        # file, a check's has none, as their producers wrote them (result.json, status.json).
        data: dict[str, Any] = handler(self)
        return {k: v for k, v in data.items() if k in self.model_fields_set}

    def status_entry(self) -> dict[str, Any]:
        """What the run's status.json says of it (``variants_failed``): its non-empty verdict,
        stage and message."""
        said = self.model_dump(include={"verdict", "stage", "message"})
        return {k: v for k, v in said.items() if v}


class Suspect(BaseModel):
    """A (variant, config) whose time cannot be trusted, and why (docs/ANTI_GAMING.md): no
    speedup is claimed for it."""

    model_config = ConfigDict(frozen=True)

    variant: str
    config_index: int
    reason: str


def dropped_from(raw: Mapping[str, Mapping[str, Any]] | None) -> dict[str, DroppedVariant]:
    """The records of a manifest's (or a harness ``runtime.Dropped``'s) plain entries."""
    return {name: DroppedVariant.model_validate(dict(d)) for name, d in (raw or {}).items()}


def suspects_from(raw: Iterable[Mapping[str, Any]] | None) -> list[Suspect]:
    """The records of a manifest's plain suspect entries."""
    return [Suspect.model_validate(dict(s)) for s in raw or []]


@dataclass(frozen=True)
class RunFiles:
    """The files of one profiled run by role: what ncu and the profiled process write, and the
    tables read from them. A run folder's are ``in_folder``; ``analyze.kernel`` names its own
    after its output prefix."""

    report: Path  # the .ncu-rep
    ncu_log: Path
    program_output: Path  # the profiled program's stdout and stderr
    manifest: Path  # the harness's record of its calls, checks and kernels
    error: Path  # the traceback the profiled program writes when it fails
    progress: Path  # one line per call done
    raw_csv: Path
    processed_csv: Path

    @classmethod
    def in_folder(cls, run_dir: Path) -> RunFiles:
        return cls(
            report=run_dir / "report.ncu-rep",
            ncu_log=run_dir / "ncu.log",
            program_output=run_dir / "program-output.log",
            manifest=run_dir / "manifest.json",
            error=run_dir / "error.json",
            progress=run_dir / "progress.txt",
            raw_csv=run_dir / "raw.csv",
            processed_csv=run_dir / "processed.csv",
        )


__all__ = [
    "DropVerdict",
    "DroppedVariant",
    "RunFiles",
    "Suspect",
    "dropped_from",
    "suspects_from",
]
