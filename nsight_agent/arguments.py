"""What callers send, checked as strictly as the requests they become: a tool's arguments
refused when unknown (saying where a misplaced knob goes), and pydantic's errors as one line.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from nsight_agent.errors import Problem

# The knobs a profiling tool takes under ``options`` (server/options.Options; a test
# keeps the two equal). Sent at the top level of a call, each is named with where it goes.
OPTION_KNOBS = frozenset(
    {
        "setup", "warmup", "sections", "replay_mode", "cache_control", "clock_control",
        "timeout_s", "ignore_kernels", "combine_kernels", "rtol", "atol", "vary_inputs", "deep",
        "correctness", "min_effect_pct", "budget_s",
    }
)  # fmt: skip


def misplaced_knob(name: str, options: bool = True) -> str:
    """What to do with an argument that is not one: a knob of ``options`` says where it goes,
    a near miss of a knob says which one, anything else (or any name, for a tool without
    ``options``) is unknown."""
    if not options:
        return f"{name} is not an argument of this tool"
    if name in OPTION_KNOBS:
        return f"{name} is not a top-level argument: pass it as options.{name}"
    close = difflib.get_close_matches(name, sorted(OPTION_KNOBS), n=1)
    if close:
        return f"{name} is not an argument: did you mean options.{close[0]}?"
    return f"{name} is not an argument of this tool"


ArgModel = TypeVar("ArgModel", bound=BaseModel)


def strict_arguments(base: type[ArgModel]) -> type[ArgModel]:
    """A tool's arguments model that refuses unknown arguments, and says where a knob sent
    at the top level goes ("timeout_s is not a top-level argument: pass it as
    options.timeout_s") instead of pydantic's "Extra inputs are not permitted"; the rejected
    values (the caller's data) are not echoed."""

    def misplaced(cls: type[BaseModel], data: Any) -> Any:
        if isinstance(data, dict):
            wrong = [str(k) for k in data if k not in cls.model_fields]
            if wrong:
                has = "options" in cls.model_fields
                text = "; ".join(misplaced_knob(name, has) for name in wrong)
                raise PydanticCustomError("unknown_argument", "{text}", {"text": text})
        return data

    config = {**base.model_config, "extra": "forbid", "hide_input_in_errors": True}
    namespace = {
        "model_config": config,
        "_misplaced": model_validator(mode="before")(classmethod(misplaced)),  # type: ignore[arg-type]
    }
    return type(base.__name__, (base,), namespace)


def validation_text(err: ValidationError) -> str:
    """A pydantic error as one line a person or a model can act on."""
    parts = []
    for e in err.errors()[:8]:
        where = ".".join(str(p) for p in e["loc"]) or "request"
        hint = ""
        if e["type"] == "extra_forbidden" and e["loc"]:
            close = difflib.get_close_matches(str(e["loc"][-1]), sorted(OPTION_KNOBS), n=1)
            hint = f" (did you mean options.{close[0]}?)" if close else ""
        parts.append(f"{where}: {e['msg']}{hint}")
    more = f" (+{err.error_count() - 8} more)" if err.error_count() > 8 else ""
    return "Malformed request: " + "; ".join(parts) + more


_PREFIXES = ("Value error, ", "Assertion failed, ")


def _said(e: Any, what: str) -> str:
    """pydantic's message in a user's words: a validator's own text without pydantic's
    "Value error, " prefix; "Input should be" as "must be"; an unknown field with a near
    miss (never the rejected value)."""
    msg = str(e["msg"])
    for prefix in _PREFIXES:
        msg = msg.removeprefix(prefix)
    if e["type"] == "missing":
        return "is required"
    if e["type"] == "extra_forbidden":
        return f"is not {what}"
    return msg.replace("Input should be", "must be", 1)


def problems_of(
    err: ValidationError,
    fields: Collection[str] = (),
    variants: Sequence[str] = (),
    what: str = "a field of the request",
    prefix: str = "",
) -> list[Problem]:
    """Each of pydantic's errors as a ``Problem`` (code ``field``, or ``request`` for the
    whole request's checks); the errors of one union field (``configs``: a list or a grid)
    joined into one. ``fields``: the model's fields, for a near miss of an unknown one;
    ``variants``: the variants' names, so ``variants.1.entry`` reads ``variant 'new' entry``;
    ``what`` an unknown name is not, ``prefix`` where the fields live (``options.``)."""
    found: dict[str, Problem] = {}
    for e in err.errors():
        loc = [p for p in e["loc"] if isinstance(p, int) or "[" not in str(p)]
        if len(loc) >= 2 and loc[0] == "variants" and isinstance(loc[1], int):
            name = variants[loc[1]] if loc[1] < len(variants) else f"#{loc[1]}"
            where = " ".join([f"variant {name!r}", *(str(p) for p in loc[2:])])
        else:
            where = prefix + ".".join(str(p) for p in loc) if loc else "request"
        said = _said(e, what)
        if e["type"] == "extra_forbidden" and loc:
            close = difflib.get_close_matches(str(loc[-1]), sorted(fields), n=1)
            said += f" (did you mean {prefix}{close[0]}?)" if close else ""
        if where in found:  # another member of a union: "must be a valid list or a valid dict"
            said = f"{found[where].message} or {said.removeprefix('must be ')}"
        found[where] = Problem("field" if loc else "request", where, said)
    return list(found.values())
