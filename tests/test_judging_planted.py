"""The planted set, scored per split, and the numbers each real report fixes.

Every catalog entry says whether it was used to tune the rules (``"split": "tuning"``) or was
recorded once and never used for tuning (``"held_out"``). The scores are computed here from the
real reports, one row per split, and must equal the table in docs/DIAGNOSIS.md (between the
planted-scores markers), so the document cannot drift from the rules. A held-out kernel is
scored as soon as its report is in tests/fixtures/planted/; until every one is, the row says how
many are recorded. A held-out miss is not fixed by changing a rule to fit it: it is the number
the document reports.

``PINNED`` holds what the current rules answer for each tuning kernel (and may hold held-out
ones once recorded): the bound, the roof and every reported cause with its gain, severity and
gain source. These values were recorded from the
rules, not derived independently: a change of a formula, a threshold, the cap on ncu's
estimates or the ranking shows here, on real reports, and has to be argued for in the commit.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.test_diagnose_planted import (
    ENTRIES,
    PLANTED,
    SPLITS,
    TUNING,
    diagnose,
    in_split,
    recorded,
)

DOC = Path(__file__).parent.parent / "docs" / "DIAGNOSIS.md"
TENSOR_GAIN = "own:1 - FP rate / min(7.4x FP32 peak, I x DRAM peak)"

Row = tuple[str, str | None, list[tuple[str, float | None, str, str | None]]]
PINNED: dict[str, Row] = {
    "uncoalesced_cuda": (
        "memory-bound",
        "dram",
        [
            ("uncoalesced_global_access", 77.4, "high", "ncu:UncoalescedGlobalAccess"),
            ("dram_at_roof", None, "high", None),
        ],
    ),
    "uncoalesced_triton": (
        "memory-bound",
        None,
        [("uncoalesced_global_access", 77.7, "high", "ncu:UncoalescedGlobalAccess")],
    ),
    "bank_conflicts_cuda": (
        "memory-bound",
        None,
        [("shared_bank_conflicts", 93.1, "high", "ncu:UncoalescedSharedAccess")],
    ),
    "too_few_blocks_cuda": (
        "latency-bound",
        None,
        [("too_few_blocks", 97.0, "high", "ncu:LaunchConfiguration")],
    ),
    "too_few_blocks_triton": (
        "latency-bound",
        None,
        [("too_few_blocks", 97.0, "high", "ncu:LaunchConfiguration")],
    ),
    "tail_effect_cuda": (
        "compute-bound",
        None,
        # Our idle share, not ncu's "up to 50 %" (100 / ceil(waves)).
        [("tail_effect", 47.5, "high", "own:partial-wave idle")],
    ),
    "occupancy_registers_cuda": (
        "latency-bound",
        None,
        [("occupancy_registers", 87.5, "high", "ncu:TheoreticalOccupancy")],
    ),
    "occupancy_smem_cuda": (
        "latency-bound",
        None,
        [("occupancy_shared_memory", 87.5, "high", "ncu:TheoreticalOccupancy")],
    ),
    "occupancy_blocksize_cuda": (
        "latency-bound",
        None,
        [("occupancy_block_size", 50.0, "high", "ncu:TheoreticalOccupancy")],
    ),
    "warp_divergence_cuda": (
        "compute-bound",
        "compute",
        [
            ("warp_divergence", 48.6, "high", "ncu:ThreadDivergence"),
            ("compute_at_roof", None, "high", None),
        ],
    ),
    "local_spills_cuda": (
        "memory-bound",
        None,
        [("local_memory_spills", 80.2, "high", "own:local share x mem%")],
    ),
    "tensor_idle_cuda": ("compute-bound", None, [("tensor_cores_idle", 92.8, "high", TENSOR_GAIN)]),
    "half_wave_cuda": (
        "latency-bound",
        None,
        [("too_few_blocks", 22.8, "medium", "own:(1-waves) x idle")],
    ),
    "fp16_nodot_triton": ("memory-bound", None, [("tensor_cores_idle", 99.0, "high", TENSOR_GAIN)]),
    "tensor_idle_triton": (
        "latency-bound",
        None,
        [("tensor_cores_idle", 97.5, "high", TENSOR_GAIN)],
    ),
    # Held out until pipe_at_roof's first version lost its slow_precision (the catalog says).
    "logistic_map_cuda": (
        "compute-bound",
        None,
        [
            ("slow_precision", 46.1, "high", "own:busy% x (1-fp64/fp32 rate)"),
            ("pipe_at_roof", None, "high", None),
        ],
    ),
    "slow_precision_cuda": (
        "compute-bound",
        "compute",
        [
            ("slow_precision", 44.5, "high", "own:busy% x (1-fp64/fp32 rate)"),
            ("compute_at_roof", None, "high", None),
        ],
    ),
    "slow_precision_triton": (
        "compute-bound",
        None,
        [("slow_precision", 35.6, "high", "own:busy% x (1-fp64/fp32 rate)")],
    ),
    "tiny_launch_cuda": (
        "latency-bound",
        None,
        [("launch_bound_tiny", 60.6, "high", "own:launch/(launch+duration)")],
    ),
    "tiny_launch_triton": (
        "latency-bound",
        None,
        [("launch_bound_tiny", 59.8, "high", "own:launch/(launch+duration)")],
    ),
    "atomic_cuda": (
        "latency-bound",
        None,
        [("atomic_contention", 49.5, "high", "own:atomics x idle")],
    ),
    "atomic_triton": (
        "latency-bound",
        None,
        [("atomic_contention", 79.3, "high", "own:atomics x idle")],
    ),
    "control_copy_cuda": ("memory-bound", "dram", [("dram_at_roof", None, "high", None)]),
    "control_copy_triton": ("memory-bound", "dram", [("dram_at_roof", None, "high", None)]),
    "control_fma_cuda": ("compute-bound", "compute", [("compute_at_roof", None, "high", None)]),
    "control_dot_triton": ("compute-bound", "compute", [("compute_at_roof", None, "high", None)]),
    "control_cublas_bf16": ("compute-bound", "compute", [("compute_at_roof", None, "high", None)]),
    "foreign_nvtx": ("memory-bound", "dram", [("dram_at_roof", None, "high", None)]),
    "foreign_nvtx_domain": ("memory-bound", "dram", [("dram_at_roof", None, "high", None)]),
}

pytestmark = pytest.mark.skipif(not ENTRIES, reason="planted fixtures not recorded yet")


def _right(entry: dict[str, Any]) -> tuple[bool, bool]:
    """(top cause right, bound right) for one kernel, as test_diagnose_planted judges them."""
    d = diagnose(entry)
    if entry["planted"] == "control":
        cause = d.bound.roof is not None and all(c.kind == "roof" for c in d.causes)
    else:
        cause = bool(d.causes) and d.causes[0].id == entry["planted"]
    return cause, d.bound.bound == entry["expected_bound"]


def _pct(n: int, total: int) -> str:
    return f"{n} ({100 * n / total:.0f} %)" if total else "-"


def split_score(split: str) -> tuple[int, int, int, int]:
    """(kernels in the catalog, recorded, top cause right, bound right) of one split."""
    entries = in_split(split)
    scored = [_right(e) for e in entries if recorded(e)]
    return len(entries), len(scored), sum(c for c, _ in scored), sum(b for _, b in scored)


def score_table() -> str:
    """The markdown table of docs/DIAGNOSIS.md, computed from the reports."""
    lines = [
        "| split | kernels | top cause right | bound right |",
        "| --- | --- | --- | --- |",
    ]
    for split in SPLITS:
        listed, n, causes, bounds = split_score(split)
        name = split.replace("_", "-")
        if n == 0 and listed:
            lines.append(f"| {name} | 0 of {listed} recorded | TODO | TODO |")
            continue
        kernels = str(n) if n == listed else f"{n} of {listed} recorded"
        lines.append(f"| {name} | {kernels} | {_pct(causes, n)} | {_pct(bounds, n)} |")
    return "\n".join(lines)


def test_every_kernel_says_which_split_it_is_in() -> None:
    assert all(e.get("split") in SPLITS for e in ENTRIES), [e["id"] for e in ENTRIES]
    ids = [e["id"] for e in ENTRIES]
    assert len(ids) == len(set(ids)), "duplicate ids in the catalog"
    # Every tuning kernel is recorded and pinned; a held-out one may be pinned once recorded.
    assert {e["id"] for e in TUNING} <= set(PINNED) <= set(ids)
    assert all(recorded(e) for e in TUNING), [e["id"] for e in TUNING if not recorded(e)]
    assert all(recorded(e) for e in ENTRIES if e["id"] in PINNED)


def test_the_catalog_beside_the_reports_is_the_benchs() -> None:
    """bench/planted/catalog.json is what record-planted reads; the fixture copy is what the
    tests score: the two must say the same thing, split included."""
    bench = Path(__file__).parent.parent / "bench" / "planted" / "catalog.json"
    if not bench.exists():
        pytest.skip("bench/planted not in this checkout")
    assert json.loads(bench.read_text()) == json.loads((PLANTED / "catalog.json").read_text())


def test_held_out_kernels_are_new_kernels() -> None:
    """A held-out kernel is not a tuning kernel under another name: its own kernel, and no
    tuning kernel's kernel name matches its regex."""
    held = [e for split in SPLITS[1:] for e in in_split(split)]
    tuning_regexes = {e["kernel_regex"] for e in TUNING}
    for entry in held:
        assert entry["kernel_regex"] not in tuning_regexes, entry["id"]
        name = entry["kernel_regex"].strip("^$")
        assert not any(re.search(r, name) for r in tuning_regexes), entry["id"]


def test_the_documented_scores_are_the_computed_ones() -> None:
    text = DOC.read_text()
    found = re.search(r"<!-- planted-scores -->\n(.*?)\n<!-- /planted-scores -->", text, re.S)
    assert found is not None, "docs/DIAGNOSIS.md lost its planted-scores markers"
    assert found.group(1) == score_table(), "update docs/DIAGNOSIS.md:\n" + score_table()


PINNED_ENTRIES = [e for e in ENTRIES if e["id"] in PINNED]


@pytest.mark.parametrize("entry", PINNED_ENTRIES, ids=[str(e["id"]) for e in PINNED_ENTRIES])
def test_the_numbers_a_real_report_fixes(entry: dict[str, Any]) -> None:
    d = diagnose(entry)
    got = (d.bound.bound, d.bound.roof, [(c.id, c.gain, c.sev, c.gain_src) for c in d.causes])
    assert got == PINNED[entry["id"]]
