"""Suites that measure speed: the MCP server's calls against the raw ncu floor, pre-launched
ncu targets, nsight-python beside us, what each ncu section costs, and two GPUs through Ray."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path
from typing import Any

from bench.results import ROOT
from bench.steps import PY, script

PERF_LIMITS = {"fast_loop": 420}
PRELAUNCH_LIMITS = {"prelaunch": 420, "attach_time": 120}
BUILDS_LIMITS = {"builds": 520}
PEER_LIMITS = {"sweep": 180, "examples": 300}
SECTION_COSTS_LIMITS = {"sections": 360}
RAY_LIMITS = {"pool": 420}
# nsight-python's own examples at its v0.9.6 tag (not part of its wheel); BENCH_PEER_EXAMPLES
# names another folder.
PEER_EXAMPLES = ROOT / ".peer" / "nsight-python-0.9.6" / "examples"


def perf(scratch: Path) -> dict[str, Any]:
    """The MCP server through a real client (bench/fast_loop.py, 2 rounds alternating): the
    raw ncu floor, a cold ncu profile_kernel, a warm timing one, a server's first call, a new
    source, compare_variants, a broken source; then the timing path against ncu's kernel
    time from 4 us to 3 ms."""
    out = scratch / "fast_loop.json"
    argv = [PY, "-m", "bench.fast_loop", "--phases", "mcp,agreement", "--rounds", "2"]
    found = script([*argv, "--json", str(out)], PERF_LIMITS["fast_loop"], out)
    return {"inputs": {"phases": ["mcp", "agreement"], "rounds": 2}, **found}


def prelaunch(scratch: Path) -> dict[str, Any]:
    """Pre-launched ncu targets through a real client (bench/prelaunch.py, 2 rounds
    alternating): the raw floor, a cold and a pre-launched profile_kernel, diagnose_kernel
    from source against a pre-launched profile of the same kernel, a burst of 10 calls; then
    where a pre-launched profile's seconds go (bench/probes/attach_time.py, 4 rounds)."""
    argv = [PY, "-m", "bench.prelaunch", "--rounds", "2", "--out", str(scratch)]
    found = script(argv, PRELAUNCH_LIMITS["prelaunch"], scratch / "prelaunch.json")
    # where a pre-launched profile's seconds go (bench/probes/attach_time.py)
    argv = [PY, "-m", "bench.probes.attach_time", "--rounds", "4", "--out", str(scratch)]
    split = script(argv, PRELAUNCH_LIMITS["attach_time"], scratch / "attach_time.json")
    return {"inputs": {"rounds": 2, "attach_rounds": 4}, **found, "attach_time": split}


def peer(scratch: Path) -> dict[str, Any]:
    """nsight-python 0.9.6 beside us on one GPU: the same fp16 matmul sweep profiled by each
    (bench/compare_sweep.py: values, columns, wall), then its own examples run by each
    (bench/fast_loop.py --phases peer) beside their two-process floor. Needs nsight-python
    0.9.6 installed and its examples folder (.peer/nsight-python-0.9.6/examples)."""
    if importlib.util.find_spec("nsight") is None:
        return {"skipped": "nsight-python is not installed (pip install nsight-python==0.9.6)"}
    found: dict[str, Any] = {"inputs": {"sweep_rounds": 2, "example_rounds": 1}}
    sweep = scratch / "sweep"
    argv = [PY, "-m", "bench.compare_sweep", str(sweep), "2"]
    found["sweep"] = script(argv, PEER_LIMITS["sweep"], sweep / "compare_sweep.json")
    examples = Path(os.environ.get("BENCH_PEER_EXAMPLES") or PEER_EXAMPLES)
    if not examples.is_dir():
        found["examples"] = {"skipped": f"no nsight-python examples at {examples}"}
        return found
    out = scratch / "peer.json"
    argv = [PY, "-m", "bench.fast_loop", "--phases", "peer", "--peer-rounds", "1"]
    argv += ["--peer-examples", str(examples), "--budget", "280", "--json", str(out)]
    found["examples"] = script(argv, PEER_LIMITS["examples"], out)
    return found


def section_costs(scratch: Path) -> dict[str, Any]:
    """What each section a diagnosis reads costs under ncu (bench/section_costs.py): one probe
    kernel, the time metric alone, every section at once and each alone, 1 and 5 calls."""
    argv = [PY, "-m", "bench.section_costs", "--out", str(scratch)]
    found = script(argv, SECTION_COSTS_LIMITS["sections"], scratch / "section_costs.json")
    return {"inputs": {"entry": "run_sfu"}, **found}


def _gpus() -> int:
    try:
        done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(line.startswith("GPU ") for line in done.stdout.splitlines())


def ray(scratch: Path) -> dict[str, Any]:
    """Two GPUs through Ray (bench/ray_pool.py): serve --executor ray over a local cluster;
    one profile_kernel alone against two at once, the timing path on the pool, a cancel.
    Needs Ray (the ray extra) and two GPUs."""
    if importlib.util.find_spec("ray") is None:
        return {"skipped": "Ray is not installed (pip install -e '.[ray]')"}
    if (gpus := _gpus()) < 2:
        return {"skipped": f"{gpus} GPU(s) here: the pool needs two"}
    out = scratch / "ray_pool.json"
    argv = [PY, "-m", "bench.ray_pool", "--rounds", "3", "--json", str(out)]
    return {"inputs": {"rounds": 3}, **script(argv, RAY_LIMITS["pool"], out)}


def builds(scratch: Path) -> dict[str, Any]:
    """Builds outside the GPU's turn (bench/build_ahead.py): four calls with a load_inline
    candidate each against one alone, and one build against torch's own load_inline."""
    out = scratch / "builds.json"
    argv = [PY, "-m", "bench.build_ahead", "--json", str(out)]
    return {"inputs": {"parts": ["build", "calls"]}, **script(argv, BUILDS_LIMITS["builds"], out)}
