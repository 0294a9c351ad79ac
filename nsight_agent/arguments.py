"""What callers send, checked as strictly as the requests they become: a tool's arguments
refused when unknown (saying where a misplaced knob goes), and pydantic's errors as one line.
"""

from __future__ import annotations

import difflib
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError, model_validator
from pydantic_core import PydanticCustomError

# The knobs a profiling tool takes under ``options`` (server/tools_profile.Options; a test
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
