"""Which variants ran their kernels under an emulator rather than on the hardware the kernels
were written for: Triton's interpreter (``TRITON_INTERPRET=1``), which is how Triton kernels
run on a CPU. Its times are the interpreter's (numpy over every program instance), often
hundreds of times a native call's, and say nothing of the kernel's speed on a GPU.

The timing worker wraps each entry (``watched``) to see whether its calls launched a kernel
through the interpreter (its grid launches are counted, ``GridExecutor.__call__``); the rows
of those variants carry ``Emulated`` = "Triton interpreter" (``label_rows``), which the judge
reads: no speed verdict between an emulated and a native variant, and every answer says so.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

TRITON_INTERPRETER = "Triton interpreter"
COLUMN = "Emulated"  # the rows' column: the emulator's name, or None (native)

_LAUNCHES = [0]  # interpreted grid launches in this process


def interpreting() -> bool:
    """Triton's interpreter is on and Triton was imported (by a source being timed)."""
    return os.environ.get("TRITON_INTERPRET") == "1" and "triton" in sys.modules


def _count_launches() -> bool:
    """Count the interpreter's grid launches from now on (once per process); False where
    this Triton has no interpreter to count."""
    try:
        from triton.runtime import interpreter
    except ImportError:
        return False
    grid = getattr(interpreter, "GridExecutor", None)
    launch = vars(grid).get("__call__") if isinstance(grid, type) else None
    if grid is None or launch is None:
        return False
    if getattr(launch, "_counted", False):
        return True

    @functools.wraps(launch)
    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        _LAUNCHES[0] += 1
        return launch(self, *args, **kwargs)

    counted._counted = True  # type: ignore[attr-defined]
    grid.__call__ = counted
    return True


def watched(
    entries: Mapping[str, Callable[..., Any]],
) -> tuple[dict[str, Callable[..., Any]], set[str]]:
    """The entries, each noting when a call of it launched an interpreted kernel, and the set
    of those variants, filled as they run; the entries unchanged when nothing is emulated."""
    emulated: set[str] = set()
    if not interpreting() or not _count_launches():
        return dict(entries), emulated

    def watch(name: str, entry: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(entry)
        def call(*args: Any, **kwargs: Any) -> Any:
            before = _LAUNCHES[0]
            try:
                return entry(*args, **kwargs)
            finally:
                if _LAUNCHES[0] != before:
                    emulated.add(name)

        return call

    return {name: watch(name, entry) for name, entry in entries.items()}, emulated


def label_rows(rows: list[dict[str, Any]], emulated: set[str]) -> None:
    """Each row's ``Emulated``: the emulator its variant's kernels ran under, else None."""
    for row in rows:
        row[COLUMN] = TRITON_INTERPRETER if row.get("Annotation") in emulated else None
