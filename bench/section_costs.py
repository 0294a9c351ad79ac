"""What each section costs under ncu on this GPU: the measurements a profiling budget
(``options.budget_s``) would choose sections by. On a GPU with ncu.

One probe kernel (``bench/probes/ncu_passthrough.py``, ``run_sfu``), one config, through the
profile use case, each call one cold ncu run:

- a warm-up run, not kept (the machine's first ncu run pays once for ncu's start and the
  probe's compile);
- ``floor``: the time metric alone, with 1 and with 5 measured calls (5 kernels): the fixed
  cost of a run and what one more profiled kernel adds at one pass;
- ``section:<S>``: each section a diagnosis reads, alone beside the time metric (1 call);
- ``one_pass``: every one of them at once (``ONE_PASS_SECTIONS``), with 1 and 5 calls.

Each row keeps the call's wall seconds, ncu's own seconds, the kernels it profiled and their
replay passes (``run.facts``: ``ncu_s``, ``ncu_kernels``, ``ncu_passes``). From them: seconds
per replay pass of one kernel (``one_pass`` 5 calls against 1), and each section's passes and
its wall over the floor's. Written to ``DIR/section_costs.json`` row by row (a run cut short
keeps what it measured).

    python3 -m bench.section_costs [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.deeper_pass import CONFIGS, probe_run
from nsight_agent.request import TIME_METRIC
from nsight_agent.service.diagnose import ONE_PASS_SECTIONS

ENTRY = "run_sfu"


def one_call(runs_root: Path, label: str, sections: list[str], calls: int) -> dict[str, Any]:
    """One cold ncu run of the probe with ``sections`` and ``calls`` measured calls."""
    start = time.perf_counter()
    run = probe_run(runs_root, ENTRY, sections, [TIME_METRIC], calls)
    row = {
        "label": label,
        "sections": sections,
        "calls": calls,
        "wall_s": round(time.perf_counter() - start, 3),
        **run.facts.model_dump(include={"ncu_s", "ncu_kernels", "ncu_passes"}),
    }
    print(json.dumps(row), flush=True)
    return row


def derived(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Seconds per replay pass of one kernel, and each section's cost over the floor."""
    by = {(r["label"], r["calls"]): r for r in rows}
    out: dict[str, Any] = {}
    one, five = by.get(("one_pass", 1)), by.get(("one_pass", 5))
    if one and five and five["ncu_passes"] and one["ncu_passes"] is not None:
        extra_passes = five["ncu_passes"] - one["ncu_passes"]
        if extra_passes > 0:
            out["s_per_kernel_pass"] = round((five["ncu_s"] - one["ncu_s"]) / extra_passes, 4)
    floor = by.get(("floor", 1))
    if floor:
        out["floor_ncu_s"] = floor["ncu_s"]
        out["sections"] = {
            r["sections"][0]: {
                "passes": r["ncu_passes"],
                "over_floor_s": round(r["ncu_s"] - floor["ncu_s"], 3),
            }
            for r in rows
            if r["label"].startswith("section:")
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    runs_root = Path(tempfile.mkdtemp(prefix="section-costs-"))
    # A machine's first ncu run pays once for what later runs find ready (ncu's own start,
    # the probe's compile): measured first and kept apart, it would be taken for the floor.
    one_call(runs_root, "warm-up", [], 1)
    plan: list[tuple[str, list[str], int]] = [
        ("floor", [], 1),
        ("floor", [], 5),
        ("one_pass", list(ONE_PASS_SECTIONS), 1),
        ("one_pass", list(ONE_PASS_SECTIONS), 5),
        *((f"section:{s}", [s], 1) for s in ONE_PASS_SECTIONS),
    ]
    rows: list[dict[str, Any]] = []
    for label, sections, calls in plan:
        rows.append(one_call(runs_root, label, sections, calls))
        result = {"entry": ENTRY, "configs": CONFIGS, "rows": rows, "derived": derived(rows)}
        (args.out / "section_costs.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(derived(rows), indent=1))


if __name__ == "__main__":
    main()
