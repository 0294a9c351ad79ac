"""The regression gate under load: ``check`` of an unchanged source, many times, while other
processes keep the CPU busy, and of a source doing twice the work; then the same on the quiet
machine. Writes ``bench/results/gate-under-load/<date>-cpu-<commit>.json`` (``bench/results.py``).

On a CPU-only machine (the timing path's perf_counter clock), from the repository root::

    python -m bench.gate_under_load --checks 20

It times a small torch source with ``nsight-agent profile --method timing``, names that run a
baseline, starts ``--hogs`` busy processes (pure Python loops, one per core by default), runs
``nsight-agent check`` on the unchanged source ``--checks`` times and once on a source doing
twice the work, then stops the hogs and does the same on the quiet machine. Each check's exit
code (0 ok, 1 regression, 3 not comparable), verdict, reason and speedup are recorded. The
target: the unchanged source never exits 1 under load; the doubled one exits 1 when it can be
judged (1 or 3 under load, 1 when quiet).
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import results

SOURCE = """
import torch

def setup(rows, cols, device="cpu"):
    return (torch.randn(rows, cols, device=device),)

def run(x):
    return torch.softmax(x, dim=-1){extra}
"""
UNCHANGED = SOURCE.format(extra="")
DOUBLED = SOURCE.format(extra=" + torch.softmax(x * 1.0, dim=-1) * 0.0")
CONFIG = ["rows=512", "cols=1024"]
SUITE = "gate-under-load"


def hog(stop: Any) -> None:
    x = 0
    while not stop.is_set():
        for i in range(100_000):
            x += i * i


def cli(*args: str, root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NSIGHT_AGENT_RUNS": str(root)}  # every command, profile included
    return subprocess.run(
        [sys.executable, "-m", "nsight_agent", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )


def answer(out: str) -> dict[str, Any]:
    """What one ``check --json`` said: comparable, why not, each config's verdict and reason."""
    try:
        d = json.loads(out)
    except json.JSONDecodeError:
        return {"unparsed": out.strip()[-300:]}
    d = d.get("diff", d)  # --remeasure wraps it
    return {
        "comparable": d.get("comparable"),
        "reasons": [r[:240] for r in d.get("reasons") or []],
        "configs": [
            {"verdict": c.get("verdict"), "speedup": c.get("speedup"), "reason": c.get("reason")}
            for c in d.get("configs") or []
        ],
    }


def checks(src: Path, root: Path, n: int, label: str) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        t0 = time.monotonic()
        p = cli("check", str(src), "--baseline", "main", "--json", root=root)
        entry = {"code": p.returncode, "s": round(time.monotonic() - t0, 1), **answer(p.stdout)}
        if p.returncode not in (0, 1, 3):
            entry["stderr"] = results.portable(p.stderr[-600:])
        out.append(entry)
        said = entry.get("reasons") or [c["reason"] for c in entry.get("configs", [])]
        print(f"{label} {i + 1}/{n}: exit {p.returncode} ({entry['s']} s) {said[:1]}", flush=True)
    return out


def baseline_facts(run_dir: Path) -> dict[str, Any]:
    """The baseline run's median time and CPU speed probes (us), from its result files."""
    facts = json.loads((run_dir / "result.json").read_text()).get("facts", {})
    with open(run_dir / "processed.csv", newline="") as f:
        first = next(csv.DictReader(f), {})
    median = float(first["MedianValue"]) if first.get("MedianValue") else None
    return {
        "median_us": round(median / 1e3, 1) if median else None,
        "cpu_probe_us": [round(p / 1e3, 1) for p in facts.get("cpu_probe_ns", [])],
    }


def codes(entries: list[dict[str, Any]]) -> dict[str, int]:
    return {str(k): v for k, v in sorted(collections.Counter(e["code"] for e in entries).items())}


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--checks", type=int, default=20)
    ap.add_argument("--hogs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--quiet-checks", type=int, default=5)
    ap.add_argument("--results", type=Path, default=results.RESULTS, help="default: bench/results")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "runs"
        same, doubled = Path(tmp) / "softmax.py", Path(tmp) / "softmax_doubled.py"
        same.write_text(UNCHANGED)
        doubled.write_text(DOUBLED)
        argv = ("profile", str(same), "--method", "timing", "--config", *CONFIG, "--json")
        p = cli(*argv, root=root)
        if p.returncode != 0:
            print(p.stdout, p.stderr)
            return 1
        run_id = json.loads(p.stdout)["run_id"]
        cli("baseline", "set", "main", run_id, root=root).check_returncode()
        baseline = baseline_facts(root / run_id)
        loads = [os.getloadavg()[0]]
        stop = multiprocessing.Event()
        hogs = [multiprocessing.Process(target=hog, args=(stop,)) for _ in range(args.hogs)]
        for h in hogs:
            h.start()
        try:
            loaded = checks(same, root, args.checks, "loaded, unchanged")
            loaded_doubled = checks(doubled, root, 1, "loaded, doubled")
        finally:
            stop.set()
            for h in hogs:
                h.join()
        loads.append(os.getloadavg()[0])
        time.sleep(2)  # the hogs gone
        quiet = checks(same, root, args.quiet_checks, "quiet, unchanged")
        quiet_doubled = checks(doubled, root, 1, "quiet, doubled")
    summary = {
        "unchanged_under_load": codes(loaded),
        "doubled_under_load": codes(loaded_doubled),
        "unchanged_quiet": codes(quiet),
        "doubled_quiet": codes(quiet_doubled),
    }
    payload = {
        "inputs": {
            "checks_under_load": args.checks,
            "quiet_checks": args.quiet_checks,
            "hogs": args.hogs,
            "cpus": os.cpu_count(),
            "config": CONFIG,
            "command": "nsight-agent check SOURCE --baseline main --json",
        },
        # what the baseline met: its median and speed probes (a loaded machine shows in both),
        # and the 1-minute load average before and after the loaded checks
        "baseline": baseline,
        "load_average_1min": [round(x, 2) for x in loads],
        "exit_codes": summary,
        "never_exit_1_unchanged_under_load": "1" not in summary["unchanged_under_load"],
        "checks": {
            "unchanged_under_load": loaded,
            "doubled_under_load": loaded_doubled,
            "unchanged_quiet": quiet,
            "doubled_quiet": quiet_doubled,
        },
    }
    print(json.dumps(summary))
    print(f"results: {results.write(SUITE, payload, args.results)}")
    return 0 if payload["never_exit_1_unchanged_under_load"] else 1


if __name__ == "__main__":
    sys.exit(main())
