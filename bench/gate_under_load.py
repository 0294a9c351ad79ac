"""The regression gate under load (issue 38, part 3): ``check`` of an unchanged source, many
times, while another process keeps the CPU busy, and of a source doing twice the work.

On a CPU-only machine (the timing path's perf_counter clock), from the repository root::

    python bench/gate_under_load.py --checks 20 --json /tmp/gate.json

It times a small torch source with ``nsight-agent profile --method timing``, names that run a
baseline, starts ``--hogs`` busy processes (pure Python loops, one per core by default), runs
``nsight-agent check`` on the unchanged source ``--checks`` times and once on a source doing
twice the work, then stops the hogs and does the same once on the quiet machine. It prints the
exit codes (0 ok, 1 regression, 3 not comparable) and each check's first verdict line. The
target: the unchanged source never exits 1 under load; the doubled one exits 1 when it can be
judged (1 or 3 under load, 1 when quiet).
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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


def first_line(out: str) -> str:
    """The verdict row of the first config, or the first reason it was not compared."""
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("NOT COMPARABLE") and i + 1 < len(lines):
            return lines[i + 1].strip()[:160]
        if line.startswith("rows="):
            return " ".join(line.split())[:160]
    return out.strip()[:160]


def checks(src: Path, root: Path, n: int, label: str) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        t0 = time.monotonic()
        p = cli("check", str(src), "--baseline", "main", root=root)
        out.append({"code": p.returncode, "s": round(time.monotonic() - t0, 1)})
        out[-1]["line"] = first_line(p.stdout or p.stderr)
        print(f"{label} {i + 1}/{n}: exit {p.returncode} ({out[-1]['s']} s) {out[-1]['line']}")
        if p.returncode not in (0, 1, 3):
            print(p.stdout[-2000:], p.stderr[-2000:])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checks", type=int, default=20)
    ap.add_argument("--hogs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--quiet-checks", type=int, default=5)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "runs"
        same, doubled = Path(tmp) / "softmax.py", Path(tmp) / "softmax_doubled.py"
        same.write_text(UNCHANGED)
        doubled.write_text(DOUBLED)
        p = cli(
            "profile", str(same), "--method", "timing", "--config", *CONFIG, "--json", root=root
        )
        if p.returncode != 0:
            print(p.stdout, p.stderr)
            return 1
        run_id = json.loads(p.stdout)["run_id"]
        cli("baseline", "set", "main", run_id, root=root).check_returncode()
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
        time.sleep(2)  # the hogs gone
        quiet = checks(same, root, args.quiet_checks, "quiet, unchanged")
        quiet_doubled = checks(doubled, root, 1, "quiet, doubled")
    codes = collections.Counter(c["code"] for c in loaded)
    summary = {
        "checks_under_load": args.checks,
        "hogs": args.hogs,
        "cpus": os.cpu_count(),
        "unchanged_exit_codes": dict(sorted(codes.items())),
        "doubled_under_load": loaded_doubled[0]["code"],
        "quiet_unchanged_exit_codes": dict(
            sorted(collections.Counter(c["code"] for c in quiet).items())
        ),
        "quiet_doubled": quiet_doubled[0]["code"],
    }
    print(json.dumps(summary))
    if args.json:
        args.json.write_text(
            json.dumps({"summary": summary, "loaded": loaded, "quiet": quiet}, indent=1)
        )
    return 0 if codes.get(1, 0) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
