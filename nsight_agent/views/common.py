"""Shared by every view: clipped text, JSON dumps without empty fields, and paging."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, Field

from nsight_agent.errors import InvalidRequestError
from nsight_agent.wording import clip as clip

ARTIFACT_URI = "nsight-agent://runs/{run_id}/{artifact}"


def dump(model: BaseModel) -> dict[str, Any]:
    """The model as JSON-ready data without empty fields: the structured content we send."""
    return model.model_dump(mode="json", exclude_none=True)


def json_size(model: BaseModel) -> int:
    """Bytes of the compact JSON of ``dump(model)``: what an answer costs a model."""
    return len(json.dumps(dump(model), separators=(",", ":")).encode())


class Page(BaseModel):
    """Where this answer sits in a longer list, and how to get the rest."""

    total: int = Field(description="Items in the full list")
    offset: int
    limit: int
    truncated: str | None = Field(
        default=None, description="Set when items were left out: the call that returns them"
    )


def page(total: int, offset: int, limit: int, follow_up: str) -> Page:
    """Paging info; ``follow_up`` is a format string with ``{offset}`` and ``{limit}``."""
    if offset < 0 or limit < 1:
        raise InvalidRequestError(
            f"offset must be >= 0 and limit >= 1 (got offset={offset}, limit={limit}).",
            "Start at offset=0 with a positive limit.",
        )
    if offset and offset >= total:  # past the end: an empty page would read as no data
        last = f"offsets 0 to {total - 1}" if total else "only offset=0"
        raise InvalidRequestError(
            f"offset={offset} is past the end: the list has {total} item(s).",
            f"Use {last}; {follow_up.format(offset=0, limit=limit)} starts at the first.",
        )
    shown_end = min(total, offset + limit)
    note = None
    if shown_end < total or offset > 0:
        rest = []
        if shown_end < total:
            rest.append(follow_up.format(offset=shown_end, limit=limit))
        if offset > 0:
            rest.append(follow_up.format(offset=max(0, offset - limit), limit=limit))
        note = (
            f"Showing items {offset}..{max(offset, shown_end - 1)} of {total}; "
            f"more with {' or '.join(rest)}."
        )
    return Page(total=total, offset=offset, limit=limit, truncated=note)
