"""Suites that check the verdicts: gaming variants, KernelBench's problems and adversarial
kernels, the smallest effect called faster or slower, drift between runs and the regression
gate under load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench import results
from bench.results import ROOT
from bench.steps import PY, command, json_in, script
from bench.sweep_results import SUITE as SWEEP_SUITE

KB = ROOT / ".kb"
KB_TESTS = KB / "src" / "kernelbench" / "unit_tests" / "test_kernels"
KB_ADVERSARIAL = ("result_reuse_kernel.py", "zero_out_kernel.py", "non_default_stream_kernel.py")
# A sample across the levels: matmuls, a norm, a reduction, fused chains, a small model.
KB_TIMING_SAMPLE = (
    "1_Square_matrix_multiplication_.py",
    "12_Matmul_with_diagonal_matrices_.py",
    "40_LayerNorm.py",
    "47_Sum_reduction_over_a_dimension.py",
    "1_Conv2D_ReLU_BiasAdd.py",
    "12_Gemm_Multiply_LeakyReLU.py",
    "14_Gemm_Divide_Sum_Scaling.py",
    "24_Conv3d_Min_Softmax.py",
    "8_ResNetBasicBlock.py",
)
KB_DIAGNOSE_SAMPLE = ("76_Gemm_Add_ReLU.py",)

ADVERSARIAL_LIMITS = {"suite": 360}
KERNELBENCH_LIMITS = {"compare_ncu": 150, "compare_timing": 90, "timing": 150, "diagnose": 90}
KERNELBENCH_TIMING_LIMITS = {"timing": 450}
EFFECT_SIZE_LIMITS = {"held_out": 330}
BASELINE_DRIFT_LIMITS = {"drift": 360}
GATE_LIMITS = {"gate": 480}


def adversarial(scratch: Path) -> dict[str, Any]:
    """The variants written to game compare_variants (bench/adversarial.py), on both methods,
    each verdict against the verdicts it is allowed."""
    out = scratch / "adversarial.json"
    argv = [PY, "-m", "bench.adversarial", "--phases", "suite", "--json", str(out)]
    return {"inputs": {"phases": ["suite"]}, **script(argv, ADVERSARIAL_LIMITS["suite"], out)}


def recorded_sweep(phase: str, root: Path = results.RESULTS) -> dict[tuple[int, str], Any]:
    """The recorded sweep's rows of one phase (its newest results file), by (level, file)."""
    sweep = results.latest(SWEEP_SUITE, root) or {"rows": []}
    return {(r["level"], r["file"]): r for r in sweep["rows"] if r["phase"] == phase}


def kernelbench(scratch: Path) -> dict[str, Any]:
    """KernelBench's three adversarial kernels on both methods, then a sample of its problems
    on the timing path and one diagnosed under ncu (bench/kernelbench_sweep.py), each row
    beside the recorded sweep's row of the same problem and phase. Needs the pinned
    KernelBench checkout in .kb."""
    if not KB.is_dir():
        return {"skipped": f"no KernelBench checkout at {KB} (docs/TESTING.md says how)"}
    limits = KERNELBENCH_LIMITS
    problem = KB / "KernelBench" / "level1" / "1_Square_matrix_multiplication_.py"
    cands = [a for name in KB_ADVERSARIAL for a in ("--candidate", str(KB_TESTS / name))]
    adversarial_rows = {}
    for method in ("ncu", "timing"):  # ncu first: it builds the extensions, timing reuses them
        argv = [PY, "-m", "nsight_agent", "compare", str(problem), *cands]
        argv += ["--method", method, "--kernelbench-result", "--json"]
        done = command(argv, limits[f"compare_{method}"])
        try:
            adversarial_rows[method] = {"rc": done["rc"], "report": json_in(done["stdout"])}
        except ValueError:
            adversarial_rows[method] = {"rc": done["rc"], "unparsed": done["tail"]}
    phases = {}
    for phase, files in (("timing", KB_TIMING_SAMPLE), ("diagnose", KB_DIAGNOSE_SAMPLE)):
        out = scratch / f"kb_{phase}"
        argv = [PY, "bench/kernelbench_sweep.py", "--kb", str(KB), "--out", str(out)]
        argv += ["--phase", phase, "--files", ",".join(files)]
        argv += ["--budget-s", str(limits[phase] - 40)]
        found = script(argv, limits[phase], out / "kernelbench_sweep.json")
        rows = (found["results"] or {}).get("rows", [])
        old = recorded_sweep(phase)
        phases[phase] = {
            "run": found["run"],
            "rows": [{**r, "recorded": old.get((r["level"], r["file"]))} for r in rows],
        }
    return {
        "inputs": {"timing": list(KB_TIMING_SAMPLE), "diagnose": list(KB_DIAGNOSE_SAMPLE)},
        "adversarial": adversarial_rows,
        "sweep": phases,
    }


def effect_size(scratch: Path) -> dict[str, Any]:
    """The smallest effect called faster or slower, held out (bench/effect_size.py): 20
    identical copies and one 5 % slower variant of a Triton kernel at four sizes, both
    methods, judged by the product's default rule."""
    out = scratch / "effect_size.json"
    argv = [PY, "bench/effect_size.py", "--held-out-only", "--copies", "20", "--json", str(out)]
    found = script(argv, EFFECT_SIZE_LIMITS["held_out"], out)
    return {"inputs": {"copies": 20, "methods": ["timing", "ncu"]}, **found}


def baseline_drift(scratch: Path) -> dict[str, Any]:
    """Drift between runs minutes apart and the regression gate (bench/baseline_drift.py):
    the same kernel timed in 6 rounds 20 s apart, a 10 % slower variant, runs on another GPU
    or ncu refused."""
    out = scratch / "baseline_drift.json"
    argv = [PY, "-m", "bench.baseline_drift", "--rounds", "6", "--gap", "20", "--json", str(out)]
    found = script(argv, BASELINE_DRIFT_LIMITS["drift"], out)
    return {"inputs": {"rounds": 6, "gap_s": 20}, **found}


def gate_under_load(scratch: Path) -> dict[str, Any]:
    """The regression gate under CPU load (bench/gate_under_load.py): nsight-agent check of
    an unchanged CPU source beside busy processes and on a quiet machine, and of one doing
    twice the work. Needs no GPU."""
    argv = [PY, "bench/gate_under_load.py", "--checks", "20", "--quiet-checks", "10"]
    done = command([*argv, "--results", str(scratch)], GATE_LIMITS["gate"])
    done.pop("stdout", None)
    payload = own_results(scratch, "gate-under-load")
    return {"run": done, **{k: v for k, v in payload.items() if k not in ("suite", "environment")}}


def kernelbench_timing(scratch: Path) -> dict[str, Any]:
    """Our KernelBench-mode runtime, ref_runtime and speedup against KernelBench's own timing
    function, same GPU, same run, over the recorded sweep's compile-phase problems
    (bench/kernelbench_timing.py). Needs the pinned KernelBench checkout in .kb."""
    if not KB.is_dir():
        return {"skipped": f"no KernelBench checkout at {KB} (docs/TESTING.md says how)"}
    limit = KERNELBENCH_TIMING_LIMITS["timing"]
    argv = [PY, "-m", "bench.kernelbench_timing", "--kb", str(KB), "--results", str(scratch)]
    done = command([*argv, "--budget-s", str(limit - 120)], limit)
    done.pop("stdout", None)
    payload = own_results(scratch, "kernelbench-timing")
    return {"run": done, **{k: payload[k] for k in ("inputs", "summary", "rows") if k in payload}}


def own_results(scratch: Path, suite: str) -> dict[str, Any]:
    """The results file a script wrote of itself under ``scratch`` (``--results``), {} when it
    wrote none."""
    found = sorted((scratch / suite).glob("*.json"))
    return json.loads(found[-1].read_text()) if found else {}
