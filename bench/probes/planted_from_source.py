"""The planted Triton kernels diagnosed from source, as ``diagnose_kernel`` does it (issue 37,
part 2: is the one pass's first cause still the planted one?). On a GPU with ncu.

Each catalog entry of language triton (bench/planted/catalog.json) becomes a source whose
``run`` is ``run_kernel.py``'s launcher for it (three launches a call); ``diagnose_source``
profiles it once per mode (``NSIGHT_AGENT_DIAGNOSE_PASS``'s choices: ``counters``, every
section the checks read only counters of, by name, the default; ``tables``, the memory
tables' counters by name; ``sections``, every section) and the kernel matching the entry's
``kernel_regex`` is read: its top cause against the planted one (a control: a roof and no
defect cause), and the call's wall seconds. Prints a line per kernel and a JSON summary;
``--out DIR`` writes DIR/planted_from_source.json (and, with ``--keep-reports``, each report
to DIR/reports/ID.MODE.ncu-rep). Each call passes the entry's ``ideal_bytes`` where the catalog
has one, as a user who knows the bytes would.

    python3 -m bench.probes.planted_from_source [--ids a,b] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from nsight_agent.service.diagnose import ONE_PASS_CHOICES, OnePass, diagnose_source
from nsight_agent.service.measure import Measuring
from nsight_agent.service.runs import load_run, report_of

PLANTED = Path(__file__).resolve().parents[1] / "planted"
SOURCE = """
import sys
sys.path.insert(0, {folder!r})
import run_kernel


def setup(device="cuda"):
    return ()


def run():
    run_kernel.main(["run_kernel.py", {kid!r}])
"""


def one(entry: dict[str, Any], runs: Path, mode: OnePass, keep: Path | None) -> dict[str, Any]:
    source = SOURCE.format(folder=str(PLANTED), kid=entry["id"])
    fields = {"source": source, "language": "triton", "configs": [{}]}
    start = time.monotonic()
    row: dict[str, Any] = {"id": entry["id"], "mode": mode, "planted": entry["planted"]}
    try:
        ideal = entry.get("ideal_bytes")  # what a user who knows the bytes would pass
        d = diagnose_source(
            fields,
            Measuring(runs_root=runs),
            limit=8,
            by_name=mode,
            ideal_bytes=float(ideal) if ideal else None,
        )
    except Exception as err:  # one kernel failing must not lose the others' rows
        return {**row, "error": f"{type(err).__name__}: {err}"[:400]}
    row["seconds"] = round(time.monotonic() - start, 2)
    if keep is not None and d.run_id:  # the report, to read the modes side by side on a CPU
        keep.mkdir(parents=True, exist_ok=True)
        shutil.copy(report_of(load_run(d.run_id, runs)), keep / f"{entry['id']}.{mode}.ncu-rep")
    mine = [k for k in d.kernels if re.search(entry["kernel_regex"], k.diagnosis.kernel)]
    if not mine:
        return {**row, "error": f"no kernel matched: {[k.diagnosis.kernel for k in d.kernels]}"}
    k = mine[0].diagnosis
    row["top"] = k.causes[0].id if k.causes else None
    row["headline"] = k.headline
    if entry["planted"] == "control":
        row["right"] = k.bound.roof is not None and all(c.kind == "roof" for c in k.causes)
    else:
        row["right"] = row["top"] == entry["planted"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--ids", help="comma-separated catalog ids (default: every Triton one)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--keep-reports", action="store_true", help="copy each report to --out")
    parser.add_argument("--modes", default="sections,counters", help="comma-separated")
    args = parser.parse_args()
    modes = [m for c in args.modes.split(",") for m in ONE_PASS_CHOICES if m == c]
    if len(modes) != len(args.modes.split(",")):
        parser.error(f"--modes: each one of {', '.join(ONE_PASS_CHOICES)}")
    catalog = json.loads((PLANTED / "catalog.json").read_text())
    wanted = set(args.ids.split(",")) if args.ids else None
    entries = [
        e
        for e in catalog
        if e["language"] == "triton"
        and e["id"] != "foreign_nvtx"
        and (not wanted or e["id"] in wanted)
    ]
    runs = Path(tempfile.mkdtemp(prefix="planted-src-"))
    rows = []
    keep = args.out / "reports" if args.keep_reports and args.out else None
    for entry, mode in ((e, m) for e in entries for m in modes):
        row = one(entry, runs, mode, keep)
        rows.append(row)
        print(json.dumps(row), flush=True)
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "planted_from_source.json").write_text(json.dumps(rows, indent=1))
    for mode in modes:
        mine = [r for r in rows if r["mode"] == mode]
        right = sum(bool(r.get("right")) for r in mine)
        seconds = [r["seconds"] for r in mine if "seconds" in r]
        print(
            json.dumps(
                {"mode": mode, "kernels": len(mine), "right": right, "seconds": sum(seconds)}
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
