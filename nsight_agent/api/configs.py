"""Configs of ``analyze.kernel``: which ones a call profiles, checked as nsight-python checks them.

Each message starts with nsight-python's own sentence for the same condition (its users and its
test suite match on those), followed by ours. The rules are its rules: configs at decoration
time or at the call, not both; none only for a function without required parameters; a scalar
stands for a one-value config; all configs of one length, between the function's required and
total parameter counts; trailing parameters left out take their defaults. Keyword arguments at
call time are accepted here (nsight-python refuses them).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from nsight_agent.errors import InvalidRequestError

NO_CONFIGS = "You have provided no configs. Provide configs at decoration time or at runtime."
BOTH_CONFIGS = (
    "You have provided configs at decoration time and at runtime. "
    "Provide configs at decoration time or at runtime."
)


def parameters(func: Callable[..., Any]) -> list[inspect.Parameter]:
    """The parameters a config fills, in order (``*args`` and ``**kwargs`` left out)."""
    return [
        p
        for p in inspect.signature(func).parameters.values()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]


def param_names(func: Callable[..., Any]) -> list[str]:
    return [p.name for p in parameters(func)]


def choose(
    func: Callable[..., Any],
    args: Sequence[Any],
    kwargs: dict[str, Any],
    runtime: Iterable[Any] | None,
    decorated: Iterable[Any] | None,
) -> Iterable[Any]:
    """The configs of one call: its arguments (one config), ``configs=`` or the decorator's."""
    if args or kwargs:
        if runtime is not None or decorated is not None:
            raise InvalidRequestError(
                "Pass either configs or the arguments of one call, not both.",
                "Drop the arguments, or the configs (given to the decorator or to the call).",
            )
        bound = inspect.signature(func).bind(*args, **kwargs)
        return [tuple(bound.arguments[n] for n in param_names(func) if n in bound.arguments)]
    if runtime is not None and decorated is not None:
        raise InvalidRequestError(
            BOTH_CONFIGS, "Drop configs= from the decorator or from the call."
        )
    if runtime is not None:
        return runtime
    if decorated is not None:
        return decorated
    if any(p.default is inspect.Parameter.empty for p in parameters(func)):
        raise InvalidRequestError(
            NO_CONFIGS,
            f"Pass configs= to @analyze.kernel or to {func.__name__}(), or call it with the "
            "arguments of one config.",
        )
    return [()]


def _is_scalar(config: Any) -> bool:
    return isinstance(config, str) or not isinstance(config, Sequence)


def normalize(func: Callable[..., Any], configs: Iterable[Any]) -> list[tuple[Any, ...]]:
    """Each config as a full argument tuple: a scalar wrapped, trailing defaults filled."""
    params = parameters(func)
    listed = [(c,) if _is_scalar(c) else tuple(c) for c in configs]
    if not listed:
        raise InvalidRequestError("configs cannot be empty.", "Give at least one configuration.")
    lengths = [len(c) for c in listed]
    if len(set(lengths)) > 1:
        raise InvalidRequestError(
            f"All configs must have the same number of arguments. Found lengths: {lengths}",
            "Give every config the same parameters; trailing parameters with defaults may be "
            "left out of all of them.",
        )
    required = sum(p.default is inspect.Parameter.empty for p in params)
    given = lengths[0]
    if not required <= given <= len(params):
        expects = (
            f"{len(params)}" if required == len(params) else f"between {required} and {len(params)}"
        )
        raise InvalidRequestError(
            f"Configs have {given} arguments, but function expects {expects}. "
            f"{func.__name__} takes ({', '.join(p.name for p in params)}); the first config is "
            f"{listed[0]!r}.",
            "Give each config one value per parameter, in order; trailing parameters with "
            "defaults may be left out.",
        )
    return [c + tuple(p.default for p in params[given:]) for c in listed]
