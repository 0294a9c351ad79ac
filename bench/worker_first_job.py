"""Where a fresh warm worker's first timing job spends its time (a diagnostic, not a target).

On the H200 a GPU host's first timing call after its worker said ready took 5-8 s while later
calls took 0.15-0.2 s. This starts one worker, waits for ready, then times three timing jobs
on new sources, each split into its pre-flight and timing stages::

    bash .whl/gpu-run.sh 'python3 -m bench.worker_first_job'
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from nsight_agent.engine import pipeline as timed_run
from nsight_agent.engine.worker.pool import WorkerPool
from nsight_agent.request import ProfileRequest

DEVICE = os.environ.get("FIRST_JOB_DEVICE", "cuda:0")
SOURCE = """
import torch

def setup(n, device="cuda"):
    return (torch.randn(n, device=device),)

def run(x):
    return x * @K@
"""


def timed(name: str, fn: Any) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.monotonic()
        try:
            return fn(*args, **kwargs)
        finally:
            print(f"  {name}: {time.monotonic() - t0:.2f} s", flush=True)

    return wrapper


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="first-job-"))
    timed_run.warm_preflight = timed("pre-flight on the worker", timed_run.warm_preflight)  # type: ignore[attr-defined]
    with WorkerPool() as pool:
        pool.run = timed("timing job on the worker", pool.run)  # type: ignore[method-assign]
        worker = pool.get(DEVICE)
        t0 = time.monotonic()
        worker.start()
        print(f"worker ready in {time.monotonic() - t0:.2f} s: {worker.info}", flush=True)
        for k in range(3):
            source = SOURCE.replace("@K@", repr(2.0 + k / 64))
            req = ProfileRequest.model_validate(
                {"source": source, "language": "torch", "configs": {"n": [1 << 24]}, "runs": 20}
            )
            t0 = time.monotonic()
            run = timed_run.time_request(req, pool, runs_root=root, device=DEVICE)
            total = time.monotonic() - t0
            print(f"timing job {k} ({run.run_id}): {total:.2f} s", flush=True)


if __name__ == "__main__":
    main()
