"""Probe (the step view): can ncu profile one launch per launch configuration of a large
step, and do those launches stand for the rest?

Under ncu each profiled launch costs its replay passes (15 for the step view's cheap
sections, about 0.05 s a pass of a small kernel on an H100:
``bench/results/section-costs/2026-12-06-h100-80gb-hbm3-1f031cd.json``),
so a 100-layer model takes minutes. Most of its launches repeat: the same kernel with the
same grid and block. This probe runs one forward step of a KernelBench level-3 model inside
an NVTX range, after a warm-up, under ncu twice:

  full     every launch of the range
  sampled  ``--filter-mode per-launch-config --launch-count 1``: one launch per configuration

and reports each run's wall time and launches profiled, then per kernel name the full run's
summed duration against the sampled one's estimate (each configuration's sampled duration
times that configuration's count in the full run), and the largest relative error. Whether
ncu 2025.3.1 accepts the filter beside ``--nvtx-include`` is the first thing it shows.

    python3 -m bench.probes.launch_config_sampling --kb .kb [--model 10_ResNet101.py] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

SECTIONS = ("SpeedOfLight", "LaunchStats", "Occupancy")
METRICS = ("gpu__time_duration.sum", "launch__grid_size", "launch__block_size")
SAMPLED = ("--filter-mode", "per-launch-config", "--launch-count", "1")

STEP = r"""
import importlib.util, sys
import nvtx, torch
spec = importlib.util.spec_from_file_location("problem", sys.argv[1])
problem = importlib.util.module_from_spec(spec)
spec.loader.exec_module(problem)
torch.manual_seed(0)
model = problem.Model(*problem.get_init_inputs()).cuda()
inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in problem.get_inputs()]
model(*inputs)
torch.cuda.synchronize()
nvtx.push_range("step")
model(*inputs)
torch.cuda.synchronize()
nvtx.pop_range()
"""


def ncu_argv(ncu: str, report: Path, script: Path, problem: Path, sampled: bool) -> list[str]:
    argv = [ncu, "--nvtx", "--nvtx-include", "step/", "-f", "-o", str(report)]
    for section in SECTIONS:
        argv += ["--section", section]
    argv += ["--metrics", ",".join(METRICS)]
    argv += list(SAMPLED) if sampled else []
    return [*argv, sys.executable, str(script), str(problem)]


def by_config(path: Path) -> dict[tuple[str, float, float], list[float]]:
    """Each (kernel, grid size, block size) of a report with its launches' durations (ns)."""
    from nsight_agent.engine.collection import extract

    found: dict[tuple[str, float, float], list[float]] = defaultdict(list)
    for r in extract.read_actions(path, metrics=list(METRICS)):
        key = (
            r.kernel,
            float(r.values["launch__grid_size"]),
            float(r.values["launch__block_size"]),
        )
        found[key].append(float(r.values["gpu__time_duration.sum"]))
    return found


def compare(
    full: dict[tuple[str, float, float], list[float]],
    sampled: dict[tuple[str, float, float], list[float]],
) -> dict[str, Any]:
    """Per kernel name: the full run's summed duration and the sampled run's estimate of it."""
    names: dict[str, dict[str, float]] = defaultdict(lambda: {"full_ns": 0.0, "estimate_ns": 0.0})
    missing = []
    for key, durations in full.items():
        names[key[0]]["full_ns"] += sum(durations)
        if key in sampled:
            names[key[0]]["estimate_ns"] += sampled[key][0] * len(durations)
        else:
            missing.append(key)
    total_full = sum(n["full_ns"] for n in names.values())
    total_estimate = sum(n["estimate_ns"] for n in names.values())
    errors = {
        name: (n["estimate_ns"] - n["full_ns"]) / n["full_ns"]
        for name, n in names.items()
        if n["full_ns"] > 0
    }
    worst = max(errors.items(), key=lambda kv: abs(kv[1]), default=(None, 0.0))
    return {
        "configs_full": len(full),
        "configs_sampled": len(sampled),
        "configs_missing_from_sampled": [list(k) for k in missing[:20]],
        "step_full_ns": total_full,
        "step_estimate_ns": total_estimate,
        "step_error": (total_estimate - total_full) / total_full if total_full else None,
        "worst_kernel": worst[0],
        "worst_error": worst[1],
        "by_kernel": {k: {**v, "error": errors.get(k)} for k, v in names.items()},
    }


def run(ncu: str, problem: Path, work: Path, sampled: bool) -> dict[str, Any]:
    script = work / "step.py"
    script.write_text(STEP)
    report = work / ("sampled" if sampled else "full")
    start = time.monotonic()
    done = subprocess.run(
        ncu_argv(ncu, report, script, problem, sampled),
        capture_output=True,
        text=True,
        timeout=560,
        check=False,
    )
    out: dict[str, Any] = {
        "seconds": round(time.monotonic() - start, 1),
        "returncode": done.returncode,
        "log_tail": (done.stdout + done.stderr)[-1500:],
    }
    path = report.with_suffix(".ncu-rep")
    if path.exists():
        configs = by_config(path)
        out["launches"] = sum(len(d) for d in configs.values())
        out["configs"] = configs
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--kb", type=Path, default=Path(".kb"))
    ap.add_argument("--model", default="10_ResNet101.py")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/out")))
    args = ap.parse_args(argv)
    problem = (args.kb / "KernelBench" / "level3" / args.model).resolve()
    ncu = os.environ.get("NCU", "ncu")
    found: dict[str, Any] = {"model": args.model, "sections": SECTIONS, "sampled_flags": SAMPLED}
    with tempfile.TemporaryDirectory() as tmp:
        runs = {
            name: run(ncu, problem, Path(tmp), name == "sampled") for name in ("full", "sampled")
        }
    for name, r in runs.items():
        found[name] = {k: v for k, v in r.items() if k != "configs"}
        print(f"{name}: {r['seconds']} s, rc {r['returncode']}, launches {r.get('launches')}")
    if "configs" in runs["full"] and "configs" in runs["sampled"]:
        found["comparison"] = compare(runs["full"]["configs"], runs["sampled"]["configs"])
        c = found["comparison"]
        print(
            f"configs {c['configs_full']} full / {c['configs_sampled']} sampled; step error "
            f"{c['step_error']}; worst kernel {c['worst_kernel']} {c['worst_error']:+.1%}"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "launch_config_sampling.json").write_text(json.dumps(found, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
