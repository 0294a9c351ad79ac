"""The fast loop on a GPU (issue 11): a warm worker's timing path against the cold ncu path.

Measures, alternating in one run so drift hits both sides:
1. per-call latency: ``pipeline.profile`` (cold: pre-flight process + ncu process) against the
   timing path on a warm worker (render a run folder + ``TimeJob``), for a source already
   compiled; the first warm call (worker start-up) is reported apart;
2. a broken source rejected by the warm pre-flight (``warm_preflight``) against the cold one;
3. agreement: the timing path's median (CUDA events, L2 flushed) against ncu's
   ``gpu__time_duration.sum`` mean (``--cache-control all``) for elementwise and matmul kernels
   from about 5 us to 5 ms; the issue asks for <= 5 % above 50 us, and the spread below.

Run on the GPU machine from the repository root (the device call's ``gpu-run.sh`` installs
the wheels ``../shared/device/wheels.sh`` gathered):
    bash .whl/gpu-run.sh 'python3 -m bench.fast_loop --rounds 3 | tee $OUT/fast_loop.txt'
Prints one line per measurement and the ratios at the end; copy them into docs/BENCHMARKS.md
with the date, GPU, driver and commit.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from nsight_agent.engine import pipeline, timing
from nsight_agent.engine.harness import render
from nsight_agent.engine.runs import new_run_dir
from nsight_agent.engine.worker import TimeJob, WorkerPool, warm_preflight
from nsight_agent.request import ProfileRequest

SOURCE = """
import torch

def setup(n, kind, device):
    if kind == "matmul":
        return (torch.randn(n, n, device=device), torch.randn(n, n, device=device))
    return (torch.randn(n, device=device),)

def run(*xs):
    return xs[0] @ xs[1] if len(xs) == 2 else xs[0] * 2.0
"""
BROKEN = SOURCE + "\ndef oops(x)\n    return x\n"
# elementwise sizes from ~5 us to ~2 ms on an H200, and matmuls up to ~5 ms
SCALE = [{"n": 1 << k, "kind": "scale"} for k in (20, 22, 24, 26, 28)]
MATMUL = [{"n": n, "kind": "matmul"} for n in (1024, 2048, 4096)]


def request(configs: list[dict[str, Any]], source: str = SOURCE) -> ProfileRequest:
    return ProfileRequest.model_validate(
        {"source": source, "language": "torch", "configs": configs, "runs": 10, "warmup": 3}
    )


def warm_timing(pool: WorkerPool, root: Path, req: ProfileRequest) -> timing.TimingResult:
    _, run_dir = new_run_dir(root)
    render.write_run_files(req, run_dir, root / pipeline.CUDA_CACHE)
    result = pool.run("cuda:0", TimeJob(str(run_dir), "cuda"), timeout=300)
    assert isinstance(result, timing.TimingResult)
    return result


def latency(pool: WorkerPool, root: Path, rounds: int) -> dict[str, list[float]]:
    req = request(SCALE[2:3])
    seen: dict[str, list[float]] = {"cold_profile": [], "warm_timing": [], "warm_first": []}
    start = time.monotonic()
    warm_timing(pool, root, req)  # worker start-up + first compile
    seen["warm_first"].append(time.monotonic() - start)
    for r in range(rounds):
        for side in (
            ("cold_profile", "warm_timing") if r % 2 == 0 else ("warm_timing", "cold_profile")
        ):
            start = time.monotonic()
            if side == "cold_profile":
                pipeline.profile(req, runs_root=root)
            else:
                warm_timing(pool, root, req)
            seen[side].append(time.monotonic() - start)
            print(f"latency {side:13s} round {r}: {seen[side][-1]:.3f} s", flush=True)
    return seen


def broken(pool: WorkerPool, root: Path, rounds: int) -> dict[str, list[float]]:
    req = request(SCALE[:1], BROKEN)
    seen: dict[str, list[float]] = {"cold_preflight": [], "warm_preflight": []}
    for r in range(rounds):
        start = time.monotonic()
        cold = pipeline.preflight(req, runs_root=root)
        seen["cold_preflight"].append(time.monotonic() - start)
        _, run_dir = new_run_dir(root)
        render.write_run_files(req, run_dir, root / pipeline.CUDA_CACHE)
        start = time.monotonic()
        warm = warm_preflight(pool, run_dir, req, "cuda:0")
        seen["warm_preflight"].append(time.monotonic() - start)
        assert not cold.ok and not warm.ok and cold.stage == warm.stage == "import"
        print(f"broken source round {r}: cold {seen['cold_preflight'][-1]:.3f} s, "
              f"warm {seen['warm_preflight'][-1]:.3f} s", flush=True)  # fmt: skip
    return seen


def agreement(pool: WorkerPool, root: Path) -> list[tuple[str, float, float]]:
    req = request(SCALE + MATMUL)
    timed = warm_timing(pool, root, req).frame()
    ncu = pipeline.profile(req, runs_root=root).processed
    ncu = ncu[ncu["Metric"] == timing.METRIC]
    out = []
    for t_row, n_row in zip(timed.to_dict("records"), ncu.to_dict("records")):
        label = f"{t_row['kind']} n={t_row['n']}"
        assert (t_row["kind"], t_row["n"]) == (n_row["kind"], int(n_row["n"])), label
        out.append((label, float(t_row["MedianValue"]), float(n_row["AvgValue"])))
        print(f"agreement {label:22s} timing {out[-1][1] / 1e3:10.2f} us  ncu "
              f"{out[-1][2] / 1e3:10.2f} us  ratio {out[-1][1] / out[-1][2]:.3f}", flush=True)  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    med = statistics.median
    with tempfile.TemporaryDirectory() as tmp, WorkerPool() as pool:
        root = Path(tmp)
        lat = latency(pool, root, args.rounds)
        bad = broken(pool, root, args.rounds)
        agree = agreement(pool, root)
    print("\n== ratios (medians) ==")
    print(f"warm worker start-up + first timing call: {lat['warm_first'][0]:.2f} s")
    print(f"timing path warm {med(lat['warm_timing']):.3f} s vs cold profile_kernel "
          f"{med(lat['cold_profile']):.2f} s: x{med(lat['cold_profile']) / med(lat['warm_timing']):.1f}")  # fmt: skip
    print(f"broken source: warm {med(bad['warm_preflight']):.3f} s vs cold "
          f"{med(bad['cold_preflight']):.2f} s")  # fmt: skip
    over = [abs(t / n - 1) * 100 for _, t, n in agree if n > 50e3]
    under = [abs(t / n - 1) * 100 for _, t, n in agree if n <= 50e3]
    if over:
        print(f"timing vs ncu above 50 us: max |diff| {max(over):.1f} % (target <= 5 %)")
    if under:
        print(f"timing vs ncu at or below 50 us: |diff| {min(under):.1f}-{max(under):.1f} %")


if __name__ == "__main__":
    main()
