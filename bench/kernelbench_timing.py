"""Our KernelBench numbers against KernelBench's own timing function, same GPU, same run.

The problems: those of the recorded sweep's compile phase (the newest
``bench/results/kernelbench-sweep/`` file, where KernelBench's timing was first set beside ours), levels taken
in turn (2, 1, 2, ...), run in that order until ``--budget-s`` is spent; the rest are
recorded as not run. Each problem's candidate (``--candidate``):

- ``graphed`` (default): the problem's ``Model`` captured in a CUDA graph at its first call,
  each call copying its inputs in, replaying and returning a copy of the output: built in
  milliseconds, it launches another number of kernels per call than the reference;
- ``compiled``: ``torch.compile(Model)``, the sweep's public candidate (20-50 s of compile
  a side).

Per problem, the side that goes first alternating:

- ours: ``compare_variants``' use case on the timing path with ``correctness="kernelbench"``
  (``--trials`` timed trials): KernelBench's fields (runtime, ref_runtime, speedup by its
  timing definition, from our pre-flight), and our verdicts on both time bases: where they
  point opposite ways the answer must say so (``said``);
- theirs: KernelBench's ``time_execution_with_cuda_event`` from the checkout (``--kb``),
  candidate first then reference as its eval times them, the same trial count, under
  ``torch.no_grad`` as our entries run (``bench/kernelbench_peer.py``: a subprocess kept for
  the whole run; a CUDA error ends it, never this process).

The ratios ours / theirs of speedup, runtime and ref_runtime; KernelBench's timing counts as
honest for a problem when both its times are at least ``--honest-min-ms``. The JSON goes
through ``bench/results.py`` (environment, commit, date) into ``--results``/kernelbench-timing/::

    bash .whl/gpu-run.sh 'python3 -m bench.kernelbench_timing --kb .kb --results $OUT'
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import kernelbench_sweep as sweep
from bench.kernelbench_peer import Peer
from bench.results import RESULTS, newest, write
from bench.sweep_results import SUITE as SWEEP_SUITE

SUITE = "kernelbench-timing"
AGREE = 0.10  # the target: |ours / theirs - 1| <= 10 %

GRAPHED_TAIL = '''

import torch


class ModelNew(torch.nn.Module):
    """The problem's Model captured in a CUDA graph at its first call: each call copies its
    inputs in, replays, and returns a copy of the output."""

    def __init__(self, *init_inputs):
        super().__init__()
        self.model = Model(*init_inputs)
        self.graph = None

    def capture(self, inputs):
        self.static = [x.clone() if torch.is_tensor(x) else x for x in inputs]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                self.model(*self.static)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.out = self.model(*self.static)

    def forward(self, *inputs):
        if self.graph is None:
            self.capture(inputs)
        for static, given in zip(self.static, inputs):
            if torch.is_tensor(static):
                static.copy_(given)
        self.graph.replay()
        return self.out.clone()
'''
TAILS = {"graphed": GRAPHED_TAIL, "compiled": sweep.COMPILED_TAIL}


def candidate_source(problem_source: str, kind: str) -> str:
    return problem_source.rstrip("\n") + "\n" + TAILS[kind]


def recorded_problems(kb: Path, recorded: Path | None = None) -> list[sweep.Problem]:
    """The recorded sweep's compile-phase problems (``recorded``, else the newest sweep in
    bench/results), levels in turn, level 2 first."""
    recorded = recorded or newest(SWEEP_SUITE)
    if recorded is None:
        raise FileNotFoundError(f"no recorded sweep under {RESULTS / SWEEP_SUITE}")
    rows = [r for r in json.loads(recorded.read_text())["rows"] if r["phase"] == "compile"]
    by_level: dict[int, list[sweep.Problem]] = {}
    for r in sorted(rows, key=lambda r: r["index"]):
        path = kb / "KernelBench" / f"level{r['level']}" / r["file"]
        by_level.setdefault(int(r["level"]), []).append(sweep.Problem(int(r["level"]), path))
    turns = [by_level[level] for level in sorted(by_level, reverse=True)]
    out = []
    for i in range(max((len(t) for t in turns), default=0)):
        out += [t[i] for t in turns if i < len(t)]
    return out


# --- ours ---------------------------------------------------------------------------------------


def ours(
    where: Any, problem: sweep.Problem, args: argparse.Namespace, limit: float
) -> dict[str, Any]:
    """Our KernelBench fields and both bases' verdicts of one problem's candidate."""
    from nsight_agent.service.profile import profile
    from nsight_agent.service.summaries import compare_summary

    source, kind = problem.path.read_text(), args.candidate
    start = time.monotonic()
    run = profile(
        where,
        "timing",
        source=source,
        variants=[{"name": "ref"}, {"name": "new", "source": candidate_source(source, kind)}],
        correctness="kernelbench",
        num_perf_trials=args.trials,
        runs=args.runs,
        timeout_s=limit,
    )
    s = compare_summary(run)
    report = s.kernelbench
    if report is None or not report.results:
        raise sweep.Failed("no KernelBench result in the answer")
    (new,) = report.results
    verdicts = {s.time_basis: s.overall["new"].verdict}
    if s.other_basis is not None:
        verdicts[s.other_basis.time_basis] = s.other_basis.overall["new"].verdict
    opposite = {verdicts.get("gpu"), verdicts.get("call")} == {"faster", "slower"}
    return {
        "run_id": run.run_id,
        "ours_s": round(time.monotonic() - start, 2),
        "ours_runtime_ms": new.runtime,
        "ours_ref_runtime_ms": new.ref_runtime,
        "ours_speedup": new.speedup,
        "ours_correct": new.correctness,
        "ours_timing": report.timing,
        "verdict_gpu": verdicts.get("gpu"),
        "verdict_call": verdicts.get("call"),
        "bases_opposite": opposite,
        "said": bool(s.disagreements) if opposite else None,
        "disagreement": s.disagreements[0] if s.disagreements else None,
    }


# --- the run ------------------------------------------------------------------------------------


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b and a > 0 and b > 0 else None


def one(
    where: Any,
    peer: Peer,
    problem: sweep.Problem,
    index: int,
    args: argparse.Namespace,
    limit: float,
) -> dict[str, Any]:
    """Both sides of one problem, the first alternating with ``index``, each within
    ``limit`` s; their ratios."""
    row: dict[str, Any] = {"level": problem.level, "file": problem.file, "status": "ok"}
    errors = []
    sides = [
        ("ours", lambda: ours(where, problem, args, limit)),
        ("kernelbench", lambda: theirs(peer, problem, args, limit)),
    ]
    row["first"] = sides[index % 2][0]
    for side, fn in sides if index % 2 == 0 else reversed(sides):
        try:
            row.update(fn())
        except Exception as err:  # the other side still runs
            errors.append(f"{side}: {sweep.cause_of(err)}")
    row["speedup_ratio"] = ratio(row.get("ours_speedup"), row.get("kb_speedup"))
    row["runtime_ratio"] = ratio(row.get("ours_runtime_ms"), row.get("kb_runtime_ms"))
    row["ref_runtime_ratio"] = ratio(row.get("ours_ref_runtime_ms"), row.get("kb_ref_runtime_ms"))
    if row.get("kb_runtime_ms") and row.get("kb_ref_runtime_ms"):
        row["honest"] = min(row["kb_runtime_ms"], row["kb_ref_runtime_ms"]) >= args.honest_min_ms
    if errors:
        row.update(status="failed", cause="; ".join(errors))
    return row


def theirs(
    peer: Peer, problem: sweep.Problem, args: argparse.Namespace, limit: float
) -> dict[str, Any]:
    start = time.monotonic()
    candidate = candidate_source(problem.path.read_text(), args.candidate)
    found = peer.time(candidate, limit)
    new, ref = found["new"]["mean_ms"], found["ref"]["mean_ms"]
    return {
        "kb_s": round(time.monotonic() - start, 2),
        "kb_runtime_ms": new,
        "kb_ref_runtime_ms": ref,
        "kb_speedup": ref / new if new > 0 else None,
        "kb_trials": found["new"]["trials"],
        "kb_device": found.get("device"),
    }


def agreement(rows: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """How close the ratios under ``key`` are to 1: median and largest deviation, and how
    many are within ``AGREE``."""
    off = [abs(r[key] - 1.0) for r in rows if r.get(key) is not None]
    if not off:
        return {"n": 0}
    return {
        "n": len(off),
        "median_abs_dev_pct": round(100 * statistics.median(off), 2),
        "max_abs_dev_pct": round(100 * max(off), 2),
        "within_10pct": sum(d <= AGREE for d in off),
    }


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ran = [r for r in rows if r["status"] != "not_run"]
    honest = [r for r in ran if r.get("honest")]
    opposite = [r for r in ran if r.get("bases_opposite")]
    return {
        "problems": len(rows),
        "ran": len(ran),
        "ok": sum(r["status"] == "ok" for r in ran),
        "speedup": agreement(ran, "speedup_ratio"),
        "speedup_honest": agreement(honest, "speedup_ratio"),
        "runtime": agreement(ran, "runtime_ratio"),
        "ref_runtime": agreement(ran, "ref_runtime_ratio"),
        "bases_opposite": len(opposite),
        "bases_opposite_said": sum(bool(r.get("said")) for r in opposite),
    }


def limit_s(args: argparse.Namespace, elapsed: float) -> float:
    """A problem's limit (each stage of our run, and KernelBench's side): the cap, or half
    of what is left of the budget, at least 30 s, so the last problem started ends soon
    after the budget."""
    cap: float = args.problem_timeout_s
    budget: float = args.budget_s
    return max(30.0, min(cap, (budget - elapsed) / 2))


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every problem within the budget; the payload the results file holds."""
    from nsight_agent.service.session import open_session

    problems = recorded_problems(args.kb)[: args.limit]
    runs_root = Path(tempfile.mkdtemp(prefix="kb-timing-runs-"))
    session, peer = open_session(runs_root), Peer(args)
    rows: list[dict[str, Any]] = []
    start = time.monotonic()
    try:
        where = session.measuring()
        for index, problem in enumerate(problems):
            if time.monotonic() - start > args.budget_s:
                rows.append({"level": problem.level, "file": problem.file, "status": "not_run"})
                continue
            began = time.monotonic()
            row = one(where, peer, problem, index, args, limit_s(args, began - start))
            row["seconds"] = round(time.monotonic() - began, 2)
            rows.append(row)
            said = f"ours {row.get('ours_speedup')}, KernelBench {row.get('kb_speedup')}"
            print(
                f"[{time.monotonic() - start:6.1f} s] L{problem.level} {problem.file}: "
                f"{row['status']}: speedup {said} {row.get('cause') or ''}",
                flush=True,
            )
    finally:
        peer.close()
        session.close()
    kb_commit = args.kb / "COMMIT"
    return {
        "inputs": {
            "problems": [f"L{p.level}/{p.file}" for p in problems],
            "candidate": args.candidate,
            "trials": args.trials,
            "runs": args.runs,
            "budget_s": args.budget_s,
            "kb_commit": kb_commit.read_text().strip()[:12] if kb_commit.exists() else None,
        },
        "summary": summary(rows),
        "rows": rows,
        "seconds": round(time.monotonic() - start, 1),
    }


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--kb", type=Path, default=sweep.ROOT / ".kb", help="KernelBench checkout")
    ap.add_argument("--results", type=Path, default=Path(os.environ.get("OUT") or RESULTS))
    ap.add_argument("--candidate", choices=sorted(TAILS), default="graphed")
    ap.add_argument("--trials", type=int, default=100, help="KernelBench's num_perf_trials")
    ap.add_argument("--runs", type=int, default=10, help="our timing path's runs at least")
    ap.add_argument("--budget-s", type=float, default=330.0, help="start no problem after it")
    ap.add_argument("--limit", type=int, help="the first N problems only")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--problem-timeout-s", type=float, default=240.0)
    ap.add_argument("--honest-min-ms", type=float, default=0.1)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    payload = run(args)
    print(json.dumps(payload["summary"], indent=1), flush=True)
    print(f"results: {write(SUITE, payload, args.results)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
