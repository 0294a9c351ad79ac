"""Terse JSON schemas for tools/list: every byte there is paid on every turn of an agent.

pydantic's schemas are written for people reading OpenAPI pages: a title on every field, an
``anyOf`` with ``null`` for every optional value, ``"default": null``, full-sentence
descriptions. The SDK validates arguments and results with the pydantic models themselves, so
the published schema can say the same thing in fewer bytes.
"""

from __future__ import annotations

import re
from typing import Any

_SENTENCE_END = re.compile(r"(?<=[.;])\s+(?=[A-Z(])")


def terse(text: str, limit: int) -> str:
    """The first sentence of ``text``, cut at a word boundary to at most ``limit`` characters."""
    first = _SENTENCE_END.split(" ".join(text.split()), maxsplit=1)[0].rstrip(".;")
    if len(first) <= limit:
        return first
    return first[: limit - 3].rsplit(" ", 1)[0] + "..."


def _is_nullable(schema: Any) -> bool:
    if not isinstance(schema, dict):
        return False
    options = schema.get("anyOf")
    return isinstance(options, list) and {"type": "null"} in options


def _without_null(options: list[Any]) -> dict[str, Any] | None:
    """``anyOf: [X, {type: null}]`` as X alone: our answers drop empty fields (``dump``) and
    an omitted argument means its default, so null never needs saying."""
    rest = [o for o in options if o != {"type": "null"}]
    if len(rest) == len(options):
        return None
    if len(rest) == 1 and isinstance(rest[0], dict):
        return dict(rest[0])
    return {"anyOf": rest}


def compact(node: Any, description_limit: int) -> Any:
    """The same schema without titles, null defaults or null unions; descriptions cut."""
    if isinstance(node, list):
        return [compact(n, description_limit) for n in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" and isinstance(value, str):
            continue
        if (key == "default" and value is None) or (
            key == "additionalProperties" and value is True
        ):
            continue  # both are what JSON schema assumes anyway
        if key == "description" and isinstance(value, str):
            if description_limit > 0:
                out[key] = terse(value, description_limit)
            continue
        if key == "properties" and isinstance(value, dict):
            out[key] = {name: compact(v, description_limit) for name, v in value.items()}
            continue
        out[key] = compact(value, description_limit)
    if isinstance(node.get("properties"), dict) and isinstance(out.get("required"), list):
        # A field that may be None is left out of an answer when it is: not required.
        maybe = {n for n, v in node["properties"].items() if _is_nullable(v)}
        out["required"] = [n for n in out["required"] if n not in maybe]
        if not out["required"]:
            del out["required"]
    folded = _without_null(out["anyOf"]) if isinstance(out.get("anyOf"), list) else None
    if folded is not None:
        rest = {k: v for k, v in out.items() if k != "anyOf"}
        out = {**folded, **rest}
    return out


def compact_output(schema: dict[str, Any], top_level_limit: int) -> dict[str, Any]:
    """An answer's schema: no field text inside nested models (their names say enough), a
    terse line for each top-level field of the answer."""
    out: dict[str, Any] = compact(schema, 0)
    for name, prop in (schema.get("properties") or {}).items():
        text = prop.get("description") if isinstance(prop, dict) else None
        if isinstance(text, str) and name in out.get("properties", {}):
            out["properties"][name]["description"] = terse(text, top_level_limit)
    return out
