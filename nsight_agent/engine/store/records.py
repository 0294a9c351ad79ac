"""Typed records of what a run produced: the variants it dropped, the measurements it holds
suspect (a run's files by role: ``run_files``).

The harness writes the first two into its manifest as plain JSON (it runs in the profiled
process and imports nothing of the store); ``dropped_from`` and ``suspects_from`` read them
there, and the run's files store them back in the same bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer

from nsight_agent.engine.store.run_files import RunFiles as RunFiles  # where the store reads it

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


__all__ = [
    "DropVerdict",
    "DroppedVariant",
    "RunFiles",
    "Suspect",
    "dropped_from",
    "suspects_from",
]
