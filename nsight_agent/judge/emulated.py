"""Times measured under an emulator (Triton's interpreter on a CPU: ``engine/harness/
emulation.py`` marks the rows of such variants) are the emulator's, not a kernel's. Every
answer labels them, and no speed verdict (faster, slower, a speedup) is given between an
emulated and a native variant: the one would be timing numpy stepping through the kernel's
program instances, the other a native call. Two emulated variants are compared with each
other, labelled, as the interpreter's times.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

COLUMN = "Emulated"  # engine/harness/emulation.COLUMN, as the rows carry it


def emulator(row: Mapping[str, Any] | None) -> str | None:
    """The emulator a row's variant ran under, None when it ran natively (or no one said)."""
    value = (row or {}).get(COLUMN)
    return value if isinstance(value, str) and value and value != "nan" else None


def label(name: str) -> str:
    """How every answer says it: "emulated: Triton interpreter, not a kernel time"."""
    return f"emulated: {name}, not a kernel time"


def no_verdict(variant: str | None, baseline: str | None) -> str:
    """Why a variant gets no speed verdict against the baseline (exactly one is emulated)."""
    name = variant or baseline or "an emulator"
    which = "this variant" if variant else "the baseline"
    other = "the baseline" if variant else "this variant"
    return (
        f"no speed verdict: {which} ran under the {name}, {other} natively, and an emulator's "
        "time is not a kernel time; time both natively (on a GPU) to compare them"
    )


def run_note(frame: pd.DataFrame) -> str | None:
    """The run's warning naming its emulated variants, None when there are none."""
    if COLUMN not in frame.columns or "Annotation" not in frame.columns:
        return None
    named: dict[str, str] = {}
    for row in frame.to_dict("records"):
        found = emulator(row)
        if found:
            named.setdefault(str(row["Annotation"]), found)
    if not named:
        return None
    who = ", ".join(repr(v) for v in named)
    return (
        f"{label(next(iter(named.values())))}: {who} launched kernels through an emulator "
        "(TRITON_INTERPRET=1, how Triton runs on a CPU), so those times are the emulator's; no "
        "speed verdict is given between an emulated and a native variant"
    )
