"""What callers send, checked as strictly as the requests they become, and answered in our
words: an unknown argument named with the one meant (a near miss, the required one still
missing, or the ``options`` knob it is), and pydantic's errors reworded, every answer ending
with a hint line (what the caller can send instead). pydantic's own phrasing ("Field
required", "Value error, ...", its documentation links) never reaches a caller.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping, Sequence
from typing import Any, TypeVar, get_args

from pydantic import BaseModel, ValidationError

from nsight_agent.errors import Problem

# The knobs a profiling tool takes under ``options`` (server/options.Options; a test
# keeps the two equal). Sent at the top level of a call, each is named with where it goes.
OPTION_KNOBS = frozenset(
    {
        "setup", "warmup", "sections", "replay_mode", "cache_control", "clock_control",
        "timeout_s", "ignore_kernels", "combine_kernels", "rtol", "atol", "vary_inputs", "deep",
        "correctness", "min_effect_pct", "budget_s", "time_basis", "num_correct_trials",
        "num_perf_trials",
    }
)  # fmt: skip

# The arguments of the tools that take ``options`` (a test keeps them equal to the tools'
# schemas). Sent inside ``options``, each is named with where it goes (server/options.py).
TOOL_ARGUMENTS = frozenset(
    {"source", "configs", "language", "entry", "metrics", "skill", "runs", "limit", "method"}
    | {"variants", "baseline", "report_path", "run_id", "offset", "ideal_bytes", "input_dtypes"}
)

ArgModel = TypeVar("ArgModel", bound=BaseModel)


def strict_arguments(base: type[ArgModel]) -> type[ArgModel]:
    """A tool's arguments model that refuses unknown arguments (never drops them without a
    word) and keeps the rejected values (the caller's data) out of its errors; the answer's
    words are ``arguments_text``'s."""
    config = {**base.model_config, "extra": "forbid", "hide_input_in_errors": True}
    return type(base.__name__, (base,), {"model_config": config})


def meant(name: str, arguments: Sequence[str], missing: Sequence[str], options: bool) -> str | None:
    """The argument an unknown ``name`` was meant to be: a near miss of an argument (or of a
    knob of ``options``, for a tool that has them), one that contains it (``probe`` for
    ``probe_counters``), else the one required argument still missing (``get_skill
    {"skill": ...}`` meant ``name``); None when nothing comes close."""
    knobs = [f"options.{k}" for k in sorted(OPTION_KNOBS)] if options else []
    close = difflib.get_close_matches(name, [*arguments, *knobs], n=1)
    if not close and options:  # the bare names: a shared "options." would make any name close
        close = [f"options.{k}" for k in difflib.get_close_matches(name, sorted(OPTION_KNOBS), n=1)]
    if not close and len(name) >= 3:
        bare = [*arguments, *(k.removeprefix("options.") for k in knobs)]
        close = [a for a in bare if name.lower() in a or a in name.lower()][:1]
        close = [c if c in arguments else f"options.{c}" for c in close]
    if not close and len(missing) == 1:
        close = list(missing)
    return close[0] if close else None


def _unknown(name: str, said: str | None, options: bool) -> str:
    if options and name in OPTION_KNOBS:
        return f"unknown argument {name!r}: it is an option; pass it as options.{name}"
    return f"unknown argument {name!r}" + (f"; did you mean {said!r}?" if said else "")


def signature(tool: str, model: type[BaseModel]) -> str:
    """``tool``'s arguments as one phrase, the required ones marked."""
    names = [n + (" (required)" if f.is_required() else "") for n, f in model.model_fields.items()]
    if not names:
        return f"{tool} takes no arguments."
    return f"{tool} takes {', '.join(names)}; their types and limits are in its input schema."


def arguments_text(
    err: ValidationError, tool: str, model: type[BaseModel], given: Mapping[str, Any]
) -> str:
    """A tool call's malformed arguments in our words: each unknown argument with the one
    meant, each missing one, each bad value with what it must be; then a hint line with
    the arguments the tool takes."""
    fields = list(model.model_fields)
    options = "options" in model.model_fields
    missing = [n for n, f in model.model_fields.items() if f.is_required() and n not in given]
    unknown = [str(k) for k in given if k not in model.model_fields]
    parts, taken = [], set()
    for name in unknown:
        said = meant(name, fields, missing if len(unknown) == 1 else [], options)
        taken.add(said)
        parts.append(_unknown(name, said, options))
    parts += [f"argument {n!r} is required" for n in missing if n not in taken]
    found: dict[str, str] = {}
    for e in _union_members_meant(err.errors()):
        if e["type"] in ("missing", "extra_forbidden") and len(e["loc"]) == 1:
            continue  # said above, from the arguments themselves
        where = ".".join(str(p) for p in e["loc"] if isinstance(p, int) or "[" not in str(p))
        said = reworded(e)
        if e["type"] == "extra_forbidden":
            keys = _keys_of(model.model_fields[str(e["loc"][0])].annotation)
            said += f" (an item of {e['loc'][0]} takes {', '.join(keys)})" if keys else ""
        member = next((str(p) for p in e["loc"] if "[" in str(p)), "")
        if len(e["loc"]) > 2 and member:  # inside the one member it was given as
            said += f" ({e['loc'][0]} given as {'a list' if member.startswith('list') else 'an object'})"
        if where in found:
            said = f"{found[where]} or {said.removeprefix('must be ')}"
        found[where] = said
    parts += [f"argument {w!r} {said}" if w else said for w, said in found.items()]
    return "; ".join(parts) + f"\nHint: {signature(tool, model)}"


def _keys_of(annotation: Any) -> list[str]:
    """The keys of the model an argument's type holds (``list[VariantInput] | None``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return list(annotation.model_fields)
    return next((k for a in get_args(annotation) if (k := _keys_of(a))), [])


def _union_members_meant(errors: Sequence[Any]) -> list[Any]:
    """pydantic's errors with, for an argument of several forms (configs: a list of configs
    or a grid of lists), only the form the value was given in: the errors inside a member
    (``configs.n``) say what is wrong, the others only that it is not that form."""
    inside = {e["loc"][0] for e in errors if len(e["loc"]) > 2 and "[" in str(e["loc"][1])}
    return [
        e
        for e in errors
        if not (e["loc"][0] in inside and len(e["loc"]) == 2 and "[" in str(e["loc"][1]))
    ]


# pydantic's messages by error type, in a caller's words (the rest: its text, reworded).
_BY_TYPE = {
    "missing": "is required",
    "extra_forbidden": "is not allowed here",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "string_type": "must be a string",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "list_type": "must be a list",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
}
_PREFIXES = ("Value error, ", "Assertion failed, ")


def reworded(e: Mapping[str, Any]) -> str:
    """One of pydantic's errors as what the value must be: a validator's own text without
    pydantic's "Value error, " prefix, "Input should be" as "must be"."""
    if e["type"] in _BY_TYPE:
        return _BY_TYPE[e["type"]]
    msg = str(e["msg"])
    for prefix in _PREFIXES:
        msg = msg.removeprefix(prefix)
    return msg.replace("Input should be", "must be", 1)


VALIDATION_HINT = "Correct each field named; the others were accepted."


def fields_text(err: ValidationError, what: str = "request") -> str:
    """pydantic's errors as ``field: what it must be`` joined by "; " (at most eight)."""
    parts = []
    for e in err.errors()[:8]:
        where = ".".join(str(p) for p in e["loc"]) or what
        said = reworded(e)
        if e["type"] == "extra_forbidden" and e["loc"]:
            close = difflib.get_close_matches(str(e["loc"][-1]), sorted(OPTION_KNOBS), n=1)
            said += f" (did you mean options.{close[0]}?)" if close else ""
        parts.append(f"{where}: {said}")
    more = f" (+{err.error_count() - 8} more)" if err.error_count() > 8 else ""
    return "; ".join(parts) + more


def validation_text(
    err: ValidationError, what: str = "request", hint: str = VALIDATION_HINT
) -> str:
    """A pydantic error as one line a person or a model can act on, then a hint line."""
    return f"Malformed {what}: {fields_text(err, what)}\nHint: {hint}"


def _said(e: Any, what: str) -> str:
    """pydantic's message in a user's words; an unknown field is not ``what``."""
    return f"is not {what}" if e["type"] == "extra_forbidden" else reworded(e)


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
