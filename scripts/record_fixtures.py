"""Record the small .ncu-rep fixtures (Triton kernels only: a report that holds a torch
kernel also stores its large CUDA module, about 5 MB) the CPU tests read, and exercise each error path.

Run on a machine with a GPU and ncu:  python scripts/record_fixtures.py OUT_DIR [SCENARIO...]
Each scenario is a profiled function below; its report, manifest and logs land in OUT_DIR
under the scenario's name. A summary of every outcome goes to OUT_DIR/outcomes.json.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import traceback
from pathlib import Path

import torch
import triton
import triton.language as tl

import nsight_agent
from nsight_agent.api import analyze

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "fixtures-out").resolve()
TIME = "gpu__time_duration.sum"


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * factor, mask=mask)


def triton_scale(x: torch.Tensor, factor: float = 2.0) -> torch.Tensor:
    out = torch.empty_like(x)
    scale_kernel[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), factor, BLOCK=256)
    return out


def triton_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, out, x.numel(), BLOCK=1024)
    return out


def inputs(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    triton_add(x, y)  # compile and warm up outside the measured ranges
    triton_scale(x)
    torch.cuda.synchronize()
    return x, y


def prefix(name: str) -> str:
    return str(OUT / name) + "/"


def sweep(n: int) -> None:
    x, y = inputs(n)
    with nsight_agent.annotate("triton_add"):
        triton_add(x, y)
    with nsight_agent.annotate("triton_scale"):
        triton_scale(x)


def two_kernels(n: int) -> None:
    x, y = inputs(n)
    with nsight_agent.annotate("scale_then_add"):
        triton_add(triton_scale(x), y)


def threaded(n: int) -> None:
    x, y = inputs(n)
    with nsight_agent.annotate("from_thread"):
        t = threading.Thread(target=lambda: (triton_add(x, y), torch.cuda.synchronize()))
        t.start()
        t.join()


def sometimes_fails(n: int) -> None:
    x, y = inputs(n)
    with nsight_agent.annotate("ok"):
        triton_add(x, y)
    with nsight_agent.annotate("flaky", ignore_failures=True):
        if n > 4096:
            raise RuntimeError("deliberate failure for large n")
        triton_add(x, y)


CALLS = [0]


def varying(n: int) -> None:
    x, y = inputs(n)
    CALLS[0] += 1
    with nsight_agent.annotate("varying"):
        triton_add(x, y)
        if CALLS[0] > 1:
            triton_scale(x)


def cpu_only(n: int) -> None:
    with nsight_agent.annotate("cpu_work"):
        torch.randn(n).sum()


def crashes(n: int) -> None:
    raise ValueError(f"deliberate crash in the profiled function (n={n})")


def hangs(n: int) -> None:
    x, y = inputs(n)
    with nsight_agent.annotate("hang"):
        triton_add(x, y)
        time.sleep(120)


SCENARIOS = [
    (
        "sweep",
        sweep,
        {"configs": [4096, 65536, 1 << 20], "runs": 3, "metrics": [TIME, "dram__bytes.sum"]},
    ),
    ("two_kernels", two_kernels, {"configs": [4096, 65536], "runs": 2}),
    # two_kernels again, recorded after the child's warm-up kernel became the default under
    # kernel replay (engine/worker/cuda_early.py): the report holds it first, the rows must not
    ("warmed_up", two_kernels, {"configs": [4096, 65536], "runs": 2}),
    ("range_replay", two_kernels, {"configs": [4096, 65536], "runs": 2, "replay_mode": "range"}),
    ("threaded", threaded, {"configs": [65536], "runs": 2}),
    ("sometimes_fails", sometimes_fails, {"configs": [1024, 8192], "runs": 2}),
    ("varying", varying, {"configs": [4096], "runs": 3}),
    ("bad_metric", sweep, {"configs": [4096], "metrics": ["gpu__time_durationX.sum"]}),
    ("cpu_only", cpu_only, {"configs": [4096]}),
    ("crashes", crashes, {"configs": [4096]}),
    ("hangs", hangs, {"configs": [4096], "timeout": 20}),
]


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    outcomes = {}
    chosen = set(sys.argv[2:])  # scenario names; all of them when none is given
    for name, func, options in SCENARIOS:
        if chosen and name not in chosen:
            continue
        start = time.monotonic()
        profiled = analyze.kernel(output_prefix=prefix(name), verbosity="quiet", **options)(func)
        (OUT / name).mkdir(parents=True, exist_ok=True)
        described = {
            k: v for k, v in options.items() if k in ("configs", "runs", "metrics", "replay_mode")
        }
        (OUT / name / "fixture.json").write_text(
            json.dumps({"function": func.__name__, **described})
        )
        try:
            results = profiled()
            frame = results.to_dataframe()
            outcome = {"ok": True, "rows": len(frame), "kernels": sorted(set(frame["Kernel"]))}
            print(frame.drop(columns=["Host", "GPU"]).to_string(max_colwidth=30))
        except Exception as err:
            outcome = {"ok": False, "error": type(err).__name__, "message": str(err)[:1500]}
            if not isinstance(err, nsight_agent.errors.NsightAgentError):
                outcome["traceback"] = traceback.format_exc()
        outcome["seconds"] = round(time.monotonic() - start, 2)
        outcomes[name] = outcome
        print(name, json.dumps(outcome)[:600], flush=True)
    (OUT / "outcomes.json").write_text(json.dumps(outcomes, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
