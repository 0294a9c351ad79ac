"""Issue 37: does the profiled child's warm-up kernel (engine/worker/cuda_early.py, mode
``warmup``) take ncu's first-kernel set-up off the measured calls, with the same rows?

One small torch function through ``analyze.kernel``, alternating the child's early-CUDA modes
(``init``: the driver only; ``warmup``: the driver, the context and one empty kernel inside
the profiled range), each call's stage split printed. After every call, whether it failed or
not, the report's kernels as ncu recorded them (name and NVTX ranges, the warm-up kernel
included): what to read if the rows are not the same. Needs a GPU and ncu::

    python -m bench.probes.warmup_kernel --rounds 3 --out $OUT/warmup
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
from pathlib import Path
from typing import Any

import torch

from nsight_agent.annotation import annotate
from nsight_agent.api import analyze
from nsight_agent.engine.worker import cuda_early


def add(n: int) -> None:
    x = torch.ones(n, device="cuda")
    with annotate("add"):
        _ = x + x


def report_kernels(report: Path) -> list[dict[str, Any]]:
    """Every action of the report as ncu wrote it: nothing dropped, nothing matched."""
    from nsight_agent.engine.collection import extract

    ctx = extract.load(report)
    return [
        {"range": r, "name": action.name(), "nvtx": extract.nvtx_ranges(action)}
        for r in range(ctx.num_ranges())
        for action in map(
            ctx.range_by_idx(r).action_by_idx, range(ctx.range_by_idx(r).num_actions())
        )
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--modes", default="init,warmup", help="the child's early-CUDA modes")
    args = parser.parse_args()
    profiled = analyze.kernel(add, configs=[(2**20,), (2**22,)], runs=3, verbosity="quiet")
    seen: dict[str, list[dict[str, Any]]] = {}
    for r in range(args.rounds):
        modes = args.modes.split(",")
        for mode in modes if r % 2 == 0 else modes[::-1]:
            os.environ[cuda_early.ENV] = mode
            prefix = args.out / f"{mode}-{r}"
            profiled.settings = dataclasses.replace(profiled.settings, output_prefix=f"{prefix}/")
            row: dict[str, Any] = {"round": r}
            try:
                res = profiled()
                frame = res.to_dataframe()
                row |= {"stages": res.stage_seconds, "seconds": round(res.seconds, 3)}
                row["rows"] = frame[["n", "Annotation", "Kernel", "AvgValue", "NumRuns"]].to_dict(
                    "records"
                )
            except Exception as err:
                row["error"] = f"{type(err).__name__}: {err}"
            reports = sorted(prefix.glob("*.ncu-rep"))
            row["report"] = report_kernels(reports[0]) if reports else "no report"
            seen.setdefault(mode, []).append(row)
            if len(seen[mode]) > 1:  # one call's files of each mode come back, not all
                shutil.rmtree(prefix, ignore_errors=True)
            else:
                for leftover in prefix.glob("spec-*.pkl"):
                    leftover.unlink()
            print(f"== round {r} {mode}: {row.get('error') or row['stages']}", flush=True)
            kernels = row["report"]
            if isinstance(kernels, list):
                for k in kernels[:4]:
                    print(f"   {k}")
                print(f"   ... {len(kernels)} kernels in the report")
            for line in row.get("rows", []):
                print(f"   row {line}")
    print("== medians (s) ==")
    for mode, rows in seen.items():
        ok = [x for x in rows if "stages" in x]
        for stage in ("imports", "calls and replay"):
            vals = [x["stages"].get(stage, float("nan")) for x in ok]
            print(f"{mode:7s} {stage:18s} {statistics.median(vals) if vals else float('nan'):.3f}")
        secs = [x["seconds"] for x in ok]
        print(
            f"{mode:7s} {'profile call':18s} {statistics.median(secs) if secs else float('nan'):.3f}"
        )
    print("== rows: the same kernels, configs and runs in every call? ==")
    shapes = {
        mode: {
            tuple((x["n"], x["Kernel"], x["NumRuns"]) for x in row["rows"])
            for row in rows
            if "rows" in row
        }
        for mode, rows in seen.items()
    }
    for mode, found in shapes.items():
        print(f"{mode:7s} {sorted(found)}")
    print("same" if len({frozenset(f) for f in shapes.values()}) == 1 else "DIFFERENT")
    (args.out / "warmup.json").write_text(json.dumps(seen, indent=1, default=str))


if __name__ == "__main__":
    main()
