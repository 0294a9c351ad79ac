"""Where each kernel of a report ran, and the kernels by time per place.

A kernel's place is the user's own NVTX range when there is one (one that does not enclose the
whole report), else the torch operator range it ran in (the harness records them with
``torch.autograd.profiler.emit_nvtx`` when diagnosing), else its own name. Pure functions over
the report's actions and each one's NVTX ranges (domain -> names open at its launch, as the
engine's ``extract.nvtx_ranges`` reads them).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from nsight_agent.annotation import CALL_DOMAIN, NVTX_DOMAIN
from nsight_agent.diagnose import metrics as dm

# emit_nvtx names a range "aten::add, seq = 12, op_id = 7, sizes = [[4096, 4096], [4096]],
# input_op_ids = [...]"; a backward node "AddmmBackward0, seq = 12, op_id = 40, sizes = ...".
_OP_FIELD = re.compile(r",\s*(seq|op_id)\s*=\s*\d+|,\s*input_op_ids\s*=.*$")
_SIZES = re.compile(r",\s*sizes\s*=\s*(\[.*?\]\])")
_BACKWARD = re.compile(r"(?:evaluate_function:\s*)?(\w+Backward\d*)\b")
_TORCH_RANGE = re.compile(r"^(aten::|autograd::|\w+Backward\d*\b)|,\s*(seq|op_id)\s*=")

Ranges = dict[str, list[str]]
# Per action: (its NVTX ranges, the label of its place, the torch op it ran in).
Placed = list[tuple[Ranges, str, str | None]]


def is_torch_range(name: str) -> bool:
    """Whether an NVTX range is one of torch's operator or autograd-node ranges."""
    return bool(_TORCH_RANGE.search(name))


def clean_op(name: str) -> str:
    """A torch operator range without its sequence numbers, with its input shapes when
    recorded (they tell two calls of one op apart); backward nodes by their name."""
    back = _BACKWARD.match(name) or (
        _BACKWARD.search(name) if "evaluate_function" in name else None
    )
    if back:
        return f"{back.group(1)} (backward)"
    sizes = _SIZES.search(name)
    head = _OP_FIELD.sub("", _SIZES.sub("", name)).strip()
    return f"{head} {sizes.group(1)}" if sizes else head


def _split(ranges: Ranges) -> tuple[list[str], list[str]]:
    """(user ranges, torch op ranges), outermost first, without the harness's own ranges."""
    ops: list[str] = []
    user: list[str] = []
    for domain, names in ranges.items():
        if domain.startswith(NVTX_DOMAIN):
            continue  # the harness's own ranges (calls, annotations, scope)
        for n in names:
            (ops if is_torch_range(n) else user).append(n)
    return user, ops


def group_of(
    ranges: Ranges, kernel: str, everywhere: frozenset[str] = frozenset()
) -> tuple[str, str | None]:
    """(group label, the torch op the kernel ran in): the user's outermost range that does
    not enclose the whole report (``everywhere``) and is not a torch op, else the outermost
    torch op, else the kernel name."""
    user, ops = _split(ranges)
    user = [u for u in user if u not in everywhere]
    op = clean_op(ops[0]) if ops else None
    if user:
        return user[0][:60], op
    if op:
        return op[:60], op
    return kernel[:60], None


def call_of(ranges: Ranges) -> int | None:
    """The index of the measured call the kernel ran in (the harness's ``call=<i>`` range)."""
    for name in ranges.get(CALL_DOMAIN, []):
        if name.startswith("call="):
            try:
                return int(name.split("=", 1)[1])
            except ValueError:
                return None
    return None


def _own(action: Any, ranges: Ranges) -> Ranges:
    """An action's ranges; a launch-sampled launch that ran in another torch operator than
    the profiled launch it is read from has that operator in place of its ranges'."""
    own = getattr(action, "own_op", None)
    if not own:
        return ranges
    out = {}
    for domain, names in ranges.items():
        ops = [n for n in names if is_torch_range(n)]
        out[domain] = [own, *(n for n in names if n not in ops)] if ops else names
    if not any(is_torch_range(n) for names in out.values() for n in names):
        out[""] = [own, *out.get("", [])]
    return out


def places(actions: Sequence[Any], ranges: Sequence[Ranges]) -> Placed:
    """Each action's (NVTX ranges, group label, torch op); ``ranges``: each action's, in
    order. Ranges enclosing every action are no action's place."""
    all_ranges = [_own(a, r) for a, r in zip(actions, ranges, strict=True)]
    user_sets = [set(_split(r)[0]) for r in all_ranges]
    everywhere = frozenset(set.intersection(*user_sets)) if user_sets else frozenset()
    return [
        (r, *group_of(r, dm.kernel_name(a), everywhere))
        for a, r in zip(actions, all_ranges, strict=True)
    ]


def _duration(action: Any) -> float:
    value = dm.Reader(action).get(dm.DURATION, required=False)
    return value or 0.0


def longest(actions: Sequence[Any]) -> Any:
    """The action of the longest duration (the largest config is usually the one to fix)."""
    return max(actions, key=_duration)


def kernels_by_time(
    actions: Sequence[Any], placed: Placed
) -> list[tuple[str, str | None, float, list[Any]]]:
    """(name, operator or range, summed ns, actions) per kernel and place, most time first;
    ``placed``: ``places(actions, ranges)``. The same kernel in two places is two entries."""
    groups: dict[tuple[str, str | None], list[Any]] = {}
    for a, (_ranges, label, _op) in zip(actions, placed, strict=True):
        name = dm.kernel_name(a)
        groups.setdefault((name, None if label == name[:60] else label), []).append(a)
    rows = [(n, op, sum(_duration(a) for a in acts), acts) for (n, op), acts in groups.items()]
    rows.sort(key=lambda r: (-r[2], r[0], r[1] or ""))
    return rows
