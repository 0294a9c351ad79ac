"""How far apart identical variants land, and so the smallest effect worth calling faster or
slower. On a machine with a GPU and ncu, from the repository root (the ``effect-size``
suite runs the held-out part)::

    python3 bench/effect_size.py --json effect_size.json

One Triton kernel (a chain of ``y = y * a + b`` with a = 1, b = 0 read at run time, so the
output equals the input whatever the chain's length) at four sizes, about 1.5 us, 12 us, 60 us
and 1.1 ms on an H100 under the timing path
(``bench/results/effect-size/2026-12-06-h100-80gb-hbm3-1f031cd.json``). Variants: the
baseline; ``same_k``, the baseline's entry again; ``side_k``, the same launch on a side stream
joined both ways; and ``slower5``, the chain 5 % longer (the same output, 5 % more work).
Through ``compare_variants``' use case (``service.profile``), on both methods:

1. calibration: one call per method with 8 ``same`` and 8 ``side`` variants: the largest
   change between an identical variant and the baseline among those whose intervals separated,
   and the smallest whole percent above 1.25 times it, the recommended ``min_effect_pct``;
2. held out (never used to choose the value): one call per method with 20 ``same``, 20 ``side``
   and ``slower5``, judged by the product's default rule; how many identical variants are
   called faster or slower (the target: none), and ``slower5``'s verdict at 50 us (the target:
   slower); beside it, what the intervals alone (``min_effect_pct`` 0) would have said.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

SOURCE = """
import torch
import triton
import triton.language as tl


@triton.jit
def fma_chain(x_ptr, out_ptr, n, iters, a, b, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    y = tl.load(x_ptr + offs, mask=mask)
    for _ in range(iters):
        y = y * a + b
    tl.store(out_ptr + offs, y, mask=mask)


def setup(n, iters, device="cuda"):
    x = torch.randn(n, device=device)
    return x, iters


def _launch(x, iters):
    out = torch.empty_like(x)
    fma_chain[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), iters, 1.0, 0.0, BLOCK=1024)
    return out


def run(x, iters):
    return _launch(x, iters)


_SIDE = {}


def run_side(x, iters):
    side = _SIDE.setdefault(x.device, torch.cuda.Stream(x.device))
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = _launch(x, iters)
    torch.cuda.current_stream().wait_stream(side)
    return out


def run_slower5(x, iters):
    return _launch(x, max(iters + 1, round(iters * 1.05)))
"""

# About 1.5 us, 12 us, 60 us and 1.1 ms on an H100 (the answer records the measured times).
CONFIGS = [
    {"n": 65536, "iters": 1},
    {"n": 1 << 20, "iters": 256},
    {"n": 1 << 20, "iters": 1600},
    {"n": 1 << 20, "iters": 32000},
]
FIFTY_US = 2  # the config index of the 50 us size


def variants(copies: int, slower: bool) -> list[dict[str, str]]:
    out = [{"name": "base", "entry": "run"}]
    for k in range(1, copies + 1):
        out += [{"name": f"same_{k}", "entry": "run"}, {"name": f"side_{k}", "entry": "run_side"}]
    if slower:
        out.append({"name": "slower5", "entry": "run_slower5"})
    return out


def one_call(where: Any, method: str, copies: int, slower: bool, seed: int) -> dict[str, Any]:
    from nsight_agent.service.profile import profile
    from nsight_agent.service.summaries import compare_summary

    start = time.monotonic()
    run = profile(
        where,
        method,  # type: ignore[arg-type]
        source=SOURCE,
        language="triton",
        variants=variants(copies, slower),
        baseline="base",
        configs=CONFIGS,
        runs=10,
        seed=seed,
    )
    took = time.monotonic() - start
    rule = compare_summary(run, limit=100)
    bare = compare_summary(run, limit=100, min_effect_pct=0.0)
    rows = []
    for cfg, cfg0 in zip(rule.configs, bare.configs, strict=True):
        base_t = cfg.variants["base"].time
        for name, v in cfg.variants.items():
            if name == "base":
                continue
            change = None if v.speedup is None else (1.0 / v.speedup - 1.0) * 100.0
            rows.append(
                {
                    "config": cfg.config_index,
                    "base_time": base_t,
                    "variant": name,
                    "group": name.split("_")[0],
                    "change_pct": change,
                    "verdict": v.verdict,
                    "intervals_only": cfg0.variants[name].verdict,
                    "rsd_pct": v.rsd_pct,
                }
            )
    return {"method": method, "run_id": run.run_id, "seconds": took, "rows": rows}


def identical(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["group"] in ("same", "side") and r["change_pct"] is not None]


def recommend(calls: list[dict[str, Any]]) -> tuple[float, float]:
    """The largest change of an identical variant whose intervals separated from the
    baseline's (the ones the effect must absorb), and the smallest whole percent above 1.25
    times it (1 % at least)."""
    separated = [
        abs(r["change_pct"])
        for c in calls
        for r in identical(c["rows"])
        if r["intervals_only"] in ("faster", "slower")
    ]
    worst = max(separated, default=0.0)
    return worst, float(max(1, math.floor(worst * 1.25) + 1))


def worst_separated_ns(calls: list[dict[str, Any]]) -> float:
    """The same, in nanoseconds: the absolute floor the smallest sizes need."""
    return max(
        (
            abs(r["change_pct"]) / 100.0 * (r["base_time"] or 0.0)
            for c in calls
            for r in identical(c["rows"])
            if r["intervals_only"] in ("faster", "slower")
        ),
        default=0.0,
    )


def table(call: dict[str, Any]) -> list[str]:
    lines = [f"-- {call['method']}: run {call['run_id']}, {call['seconds']:.1f} s"]
    for i, _ in enumerate(CONFIGS):
        rows = [r for r in call["rows"] if r["config"] == i]
        ident = [r for r in identical(rows) if r["config"] == i]
        if not rows:
            continue
        changes = [abs(r["change_pct"]) for r in ident]
        flagged = sum(r["verdict"] in ("faster", "slower") for r in ident)
        bare = sum(r["intervals_only"] in ("faster", "slower") for r in ident)
        slow = next((r for r in rows if r["variant"] == "slower5"), None)
        base_us = (rows[0]["base_time"] or 0) / 1e3
        lines.append(
            f"config {i} ({base_us:.3g} us): {len(ident)} identical, max |change| "
            f"{max(changes, default=0):.2f} %, faster/slower by the rule {flagged}, by intervals "
            f"alone {bare}"
            + (
                f"; slower5 {slow['change_pct']:+.2f} % {slow['verdict']}"
                if slow and slow["change_pct"] is not None
                else (f"; slower5 {slow['verdict']}" if slow else "")
            )
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--methods", default="timing,ncu")
    parser.add_argument("--copies", type=int, default=20)
    parser.add_argument(
        "--held-out-only", action="store_true", help="skip calibration (it ran before)"
    )
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes (a CPU check, TRITON_INTERPRET=1)"
    )
    args = parser.parse_args()
    if args.smoke:
        CONFIGS[:] = [{"n": 1024, "iters": 1}, {"n": 1024, "iters": 2}]
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from nsight_agent.request import MIN_EFFECT_NS, MIN_EFFECT_PCT
    from nsight_agent.service.session import open_session

    methods = args.methods.split(",")
    session = open_session(Path(tempfile.mkdtemp(prefix="effect-size-")))
    out: dict[str, Any] = {"configs": CONFIGS, "default_min_effect_pct": MIN_EFFECT_PCT}
    try:
        where = session.measuring()
        if not args.held_out_only:
            calib = [one_call(where, m, 8, False, seed=1) for m in methods]
            (worst, value), worst_ns = recommend(calib), worst_separated_ns(calib)
            out["calibration"] = calib
            out["recommended_min_effect_pct"] = value
            print(f"calibration: largest separated |change| of an identical variant {worst:.2f} %")
            print(f"({worst_ns:.0f} ns); recommended min_effect_pct {value:g} (the product's ")
            print(f"default: {MIN_EFFECT_PCT:g} % and {MIN_EFFECT_NS:g} ns)")
            for c in calib:
                print("\n".join(table(c)), flush=True)
        print("held out (the product's default rule):")
        out["held_out"] = []
        for m in methods:
            out["held_out"].append(one_call(where, m, args.copies, True, seed=2))
            print("\n".join(table(out["held_out"][-1])), flush=True)
            if args.json:  # kept if a later call is cut off
                args.json.write_text(json.dumps(out, indent=1))
    finally:
        session.close()
        if args.json:
            args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
