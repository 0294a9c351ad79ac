"""Probe (H200): where the timing path's error and cost come from.

1. L2 flush before each timed call, three ways, on an elementwise scale of 2^18 to 2^26 floats
   and a 2048 matmul (CUPTI record medians of 15 calls): ``zero`` writes a buffer of twice the
   L2 (the L2 is left full of dirty lines, which the timed kernel must write back when it
   evicts them), ``read`` reads it (the L2 is left holding clean lines, as after ncu's flush),
   ``none``.
2. Tracing cost: 10 calls of a 4 us kernel with one profiler session per call's run (as the
   timing loop did) against one session around all 10.
3. A warm ``time_request`` (one config, 10 runs) split into its pre-flight and its timing job.

Prints readings; no assertion. Run from the repository root on the GPU machine:
``python3 -m bench.probes.timing_cost``.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from nsight_agent.engine.worker.timer import Timer


class FlushTimer(Timer):
    def __init__(self, how: str) -> None:
        super().__init__("cuda", flush_l2=how != "none")
        self.how = how

    def flush_l2(self) -> None:
        if self.flush is None:
            return
        if self.how == "zero":
            self.flush.zero_()
        else:
            torch.amax(self.flush)


def scale(x: torch.Tensor) -> torch.Tensor:
    return x * 2.0


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b


def cupti_median(timer: Timer, entry: Any, inputs: tuple[Any, ...], n: int = 15) -> float:
    for _ in range(3):
        timer.measure(entry, inputs)
    timer.start_run()
    calls = [timer.measure(entry, inputs) for _ in range(n)]
    timer.end_run()
    return statistics.median(c.ns for c in calls)


def flush_modes() -> None:
    cases: list[tuple[str, Any, tuple[Any, ...]]] = [
        (f"scale 2^{k}", scale, (torch.randn(1 << k, device="cuda"),)) for k in (18, 20, 22, 24, 26)
    ]
    m = torch.randn(2048, 2048, device="cuda")
    cases.append(("matmul 2048", matmul, (m, m)))
    timers = {how: FlushTimer(how) for how in ("zero", "read", "none")}
    for label, entry, inputs in cases:
        got = {how: cupti_median(t, entry, inputs) for how, t in timers.items()}
        print(
            f"flush  {label:12s} "
            + "  ".join(f"{how} {ns / 1e3:9.2f} us" for how, ns in got.items())
            + f"  zero/read x{got['zero'] / got['read']:.3f}"
        )


def events_vs_records() -> None:
    """The timer's two clocks on the same calls (L2 flushed by a read, spin kernel in front
    of the start event): CUPTI's kernel record and the CUDA events around the call."""
    timer = Timer("cuda", flush_l2=True)
    for k in (18, 20, 22, 24, 26):
        x = torch.randn(1 << k, device="cuda")
        for _ in range(3):
            timer.measure(scale, (x,))
        timer.start_run()
        calls = [timer.measure(scale, (x,)) for _ in range(15)]
        timer.end_run()
        rec = statistics.median(c.ns for c in calls)
        ev = statistics.median(c.events_ns for c in calls)
        print(
            f"clocks scale 2^{k}: records {rec / 1e3:8.2f} us  events {ev / 1e3:8.2f} us  "
            f"events - records {(ev - rec) / 1e3:6.2f} us"
        )


def tracing_cost() -> None:
    timer = Timer("cuda", flush_l2=True)
    x = torch.randn(1 << 20, device="cuda")
    for _ in range(3):
        timer.measure(scale, (x,))
    for label in ("per run", "one session", "per run", "one session"):
        start = time.perf_counter()
        if label == "per run":
            for _ in range(10):
                timer.start_run()
                timer.measure(scale, (x,))
                timer.end_run()
        else:
            timer.start_run()
            for _ in range(10):
                timer.measure(scale, (x,))
            timer.end_run()
        print(f"trace  {label:12s} 10 calls {1e3 * (time.perf_counter() - start):7.1f} ms")


SOURCE = """
import torch

def setup(n, device="cuda"):
    return (torch.randn(n, device=device),)

def run(x):
    return x * 2.0
"""


def warm_split() -> None:
    from nsight_agent.engine import pipeline
    from nsight_agent.engine.worker import pool as pool_module
    from nsight_agent.request import ProfileRequest

    spent: dict[str, float] = {}

    def timed(name: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] = spent.get(name, 0.0) + time.perf_counter() - start

        return wrapper

    pipeline.warm_preflight = timed("preflight", pipeline.warm_preflight)  # type: ignore[assignment]
    run_job = pool_module.WorkerPool.run
    pool_module.WorkerPool.run = timed("timing job", run_job)  # type: ignore[method-assign]
    req = ProfileRequest.model_validate(
        {"source": SOURCE, "language": "torch", "configs": [{"n": 1 << 20}], "runs": 10}
    )
    with tempfile.TemporaryDirectory() as tmp, pool_module.WorkerPool() as pool:
        for i in range(6):
            spent.clear()
            start = time.perf_counter()
            pipeline.time_request(req, pool, runs_root=Path(tmp))
            total = time.perf_counter() - start
            parts = "  ".join(f"{k} {v:.3f} s" for k, v in spent.items())
            print(
                f"warm   call {i}: {total:.3f} s  ({parts}, rest {total - sum(spent.values()):.3f} s)"
            )


GAMES = """
import torch

def setup(rows, cols, device="cuda"):
    gen = torch.Generator().manual_seed(7)  # the same inputs every run
    return (torch.randn(rows, cols, generator=gen).to(device),)

def run(x):
    return torch.softmax(x, dim=-1)

_KEPT = {}

def token(x):
    _ = x[:1, :1] * 2
    if x.shape not in _KEPT:
        _KEPT[x.shape] = torch.softmax(x, dim=-1)
    return _KEPT[x.shape].clone()

def fused(x):
    e = (x - x.amax(dim=-1, keepdim=True)).exp()
    return e / e.sum(dim=-1, keepdim=True)
"""


def work_report(out: Path) -> None:
    """The ncu path's work check on a token kernel in front of a cached result (inputs not
    varied, so only the work check and the storage watch can see it), with its report kept
    as a CPU test fixture."""
    import shutil

    from nsight_agent.engine import pipeline
    from nsight_agent.request import ProfileRequest

    req = ProfileRequest.model_validate(
        {
            "source": GAMES,
            "language": "torch",
            "configs": {"rows": [4096], "cols": [1000]},
            "variants": [
                {"name": "run"},
                {"name": "token", "entry": "token"},
                {"name": "fused", "entry": "fused"},
            ],
            "runs": 3,
            "vary_inputs": False,
            # Asked for, so the rows stay in the answer and the fractions can be shown.
            "metrics": ["gpu__time_duration.sum", "dram__bytes.sum", "smsp__inst_executed.sum"],
        }
    )
    with tempfile.TemporaryDirectory() as tmp:
        result = pipeline.profile(req, runs_root=Path(tmp))
        from nsight_agent.engine.collection import check

        print("work   suspects", result.suspects)
        print("work   work check alone", check.work_suspects(result.processed, req))
        print("work   dropped", result.dropped)
        print(result.processed[["Annotation", "Metric", "AvgValue"]].to_string())
        out.mkdir(parents=True, exist_ok=True)
        for name in ("report.ncu-rep", "manifest.json", "request.json"):
            shutil.copy(result.run_dir / name, out / name)
        print("work   report bytes", (out / "report.ncu-rep").stat().st_size)


def main() -> None:
    import os
    import sys

    if "work" in sys.argv:
        work_report(Path(os.environ.get("OUT", ".")) / "work_fixture")
    if "events" in sys.argv:
        events_vs_records()
    if "timing" in sys.argv:
        flush_modes()
        tracing_cost()
        warm_split()


if __name__ == "__main__":
    main()
