"""The named bench suites for any machine with an NVIDIA GPU and Nsight Compute.

``python -m bench run SUITE [SUITE ...]`` runs each under its own time limit and writes
``bench/results/<suite>/<date>-<gpu>-<commit>.json`` (``bench/results.py``); ``python -m bench
list`` names them. Nothing here assumes how the machine was obtained: run it from the
repository root with the project importable (an install, or PYTHONPATH=.).

- ``gpu-tests``: the ``gpu``-marked tests, then the ``gpu_fault`` ones alone (they fault or hang
  the GPU on purpose; beside other ncu runs they broke them), each test's outcome and seconds.
- ``conformance``: the conformance matrix's requests under ncu, each against the timing path's
  answer, and wrong outputs judged on both methods (the ``gpu`` rows of those two test files).
- ``examples``: every ``examples/NN_*.py`` in a scratch folder of its own, and the MCP demo.
- ``adversarial``: the variants written to game ``compare_variants`` (``bench/adversarial.py``),
  both methods, each verdict against the verdicts it is allowed.
- ``builds``: builds outside the GPU's turn (``bench/build_ahead.py``): four calls with a
  ``load_inline`` candidate each against one alone, one build against torch's ``load_inline``.
- ``kernelbench``: KernelBench's three adversarial kernels on both methods, then a sample of its
  problems on the timing path and diagnosed under ncu (``bench/kernelbench_sweep.py``), each row
  beside the row of the same problem and phase in the recorded sweep.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.results import ROOT

PY = sys.executable
KB = ROOT / ".kb"
KB_TESTS = KB / "src" / "kernelbench" / "unit_tests" / "test_kernels"
KB_ADVERSARIAL = ("result_reuse_kernel.py", "zero_out_kernel.py", "non_default_stream_kernel.py")
RECORDED_SWEEP = ROOT / "docs" / "kernelbench" / "kernelbench_sweep.json"
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


def _run(argv: list[str], limit_s: float, cwd: Path = ROOT, **env: str) -> dict[str, Any]:
    """One command under its own limit: exit code, seconds and the last lines it printed
    (also echoed, so a log of the whole suite shows where time went)."""
    start = time.monotonic()
    print(f"=== {' '.join(argv)} (limit {limit_s:.0f} s)", flush=True)
    try:
        done = subprocess.run(
            argv,
            cwd=cwd,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
            capture_output=True,
            text=True,
            timeout=limit_s,
            check=False,
        )
        rc, text = done.returncode, done.stdout + "\n" + done.stderr
    except subprocess.TimeoutExpired as err:
        out = err.stdout or ""
        rc, text = 124, out.decode() if isinstance(out, bytes) else out
    print(text[-4000:], flush=True)
    seconds = round(time.monotonic() - start, 1)
    print(f"=== rc={rc} in {seconds} s", flush=True)
    return {"rc": rc, "seconds": seconds, "tail": text[-1500:], "stdout": text}


def _junit(path: Path) -> list[dict[str, Any]]:
    """Each test case of a JUnit XML file: its id, outcome and seconds."""
    if not path.is_file():
        return []
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome = "passed"
        for tag in ("failure", "error", "skipped"):
            if case.find(tag) is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        cases.append({"test": name, "outcome": outcome, "seconds": float(case.get("time", 0))})
    return cases


# The matrix's ncu rows and the output judgement run a full ncu profile and a timing run per
# case: a suite of their own, so that each suite fits within one 600 s command.
JUDGEMENT_TESTS = ("tests/test_conformance.py", "tests/test_output_judgement.py")


def _pytest(
    scratch: Path, name: str, marker: str, paths: list[str], limit: float
) -> dict[str, Any]:
    """One pytest step: its exit, seconds and each test case's outcome (JUnit XML)."""
    xml = scratch / f"{name}.xml"
    workers = ["-n", "6"] if marker != "gpu_fault" else []  # ncu runs queue on the GPU's lock
    argv = [PY, "-m", "pytest", "-m", marker, *workers, "-v", "-rfEX", "--tb=short"]
    step = _run([*argv, f"--junitxml={xml}", *paths], limit)
    # Cut by its limit, pytest writes no XML: each test's line in its output still says.
    tests = _junit(xml) or _outcomes(step.pop("stdout"))
    return {**step, "tests": tests}


def _outcomes(text: str) -> list[dict[str, Any]]:
    """Each test's outcome as pytest -v printed it (no seconds)."""
    found = re.findall(r"\b(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (tests/\S+)", text)
    return [{"test": test, "outcome": outcome.lower(), "seconds": None} for outcome, test in found]


def _counted(steps: dict[str, dict[str, Any]]) -> dict[str, Any]:
    cases = [c for step in steps.values() for c in step["tests"]]
    counts = {k: sum(c["outcome"] == k for c in cases) for k in ("passed", "failed", "error")}
    return {"steps": steps, "counts": counts}


def gpu_tests(scratch: Path) -> dict[str, Any]:
    """The gpu-marked tests, then the gpu_fault ones alone: each test's outcome and seconds."""
    ignore = [f"--ignore={t}" for t in JUDGEMENT_TESTS]
    steps = {
        "gpu": _pytest(scratch, "gpu", "gpu and not gpu_fault", [*ignore, "tests/"], 420),
        "gpu_fault": _pytest(scratch, "gpu_fault", "gpu_fault", ["tests/"], 120),
    }
    return {
        "inputs": {"markers": ["gpu", "gpu_fault"], "ignored": list(JUDGEMENT_TESTS)},
        **_counted(steps),
    }


def conformance(scratch: Path) -> dict[str, Any]:
    """The matrix's rows under ncu against the timing path, and wrong outputs on both methods."""
    steps = {"conformance": _pytest(scratch, "conformance", "gpu", list(JUDGEMENT_TESTS), 260)}
    return {"inputs": {"tests": list(JUDGEMENT_TESTS)}, **_counted(steps)}


def examples(scratch: Path) -> dict[str, Any]:
    """Every examples/NN_*.py in a scratch folder of its own, then the MCP demo."""
    rows = []
    for example in sorted((ROOT / "examples").glob("[0-9][0-9]_*.py")):
        folder = scratch / example.stem
        folder.mkdir(parents=True, exist_ok=True)
        done = _run([PY, str(example)], 120, cwd=folder, NSIGHT_AGENT_EXAMPLE_OUT=str(folder))
        done.pop("stdout")
        rows.append({"example": example.name, **done})
    demo = _run([PY, "-m", "nsight_agent.demo"], 120)
    demo.pop("stdout")
    return {
        "inputs": {"examples": [r["example"] for r in rows]},
        "examples": rows,
        "passed": sum(r["rc"] == 0 for r in rows),
        "demo": demo,
    }


def adversarial(scratch: Path) -> dict[str, Any]:
    """Variants written to game compare_variants, both methods, against allowed verdicts."""
    out = scratch / "adversarial.json"
    phases = "suite"
    done = _run([PY, "-m", "bench.adversarial", "--phases", phases, "--json", str(out)], 240)
    done.pop("stdout")
    found = json.loads(out.read_text()) if out.is_file() else {}
    return {"inputs": {"phases": phases.split(",")}, "run": done, "results": found}


def builds(scratch: Path) -> dict[str, Any]:
    """Four calls with a load_inline candidate each against one; a build against torch's."""
    out = scratch / "builds.json"
    done = _run([PY, "-m", "bench.build_ahead", "--json", str(out)], 560)
    done.pop("stdout")
    found = json.loads(out.read_text()) if out.is_file() else {}
    return {"inputs": {"parts": ["build", "calls"]}, "run": done, "results": found}


def _recorded(phase: str) -> dict[tuple[int, str], dict[str, Any]]:
    """The recorded sweep's rows of one phase, by (level, problem file)."""
    if not RECORDED_SWEEP.is_file():
        return {}
    rows = json.loads(RECORDED_SWEEP.read_text())["rows"]
    return {(r["level"], r["file"]): r for r in rows if r["phase"] == phase}


def _json_in(text: str) -> Any:
    """The JSON document a command printed to stdout (before anything on stderr)."""
    start = text.find("{")
    return json.JSONDecoder().raw_decode(text[start:])[0] if start >= 0 else None


def kernelbench(scratch: Path) -> dict[str, Any]:
    """KernelBench's adversarial kernels on both methods; a sample timed and diagnosed."""
    if not KB.is_dir():
        return {"skipped": f"no KernelBench checkout at {KB} (docs/BENCHMARKS.md says how)"}
    problem = KB / "KernelBench" / "level1" / "1_Square_matrix_multiplication_.py"
    cands = [a for name in KB_ADVERSARIAL for a in ("--candidate", str(KB_TESTS / name))]
    adversarial_rows = {}
    for method in ("ncu", "timing"):  # ncu first: it builds the extensions, timing reuses them
        argv = [PY, "-m", "nsight_agent", "compare", str(problem), *cands]
        done = _run([*argv, "--method", method, "--kernelbench-result", "--json"], 150)
        try:
            adversarial_rows[method] = {"rc": done["rc"], "report": _json_in(done["stdout"])}
        except ValueError:
            adversarial_rows[method] = {"rc": done["rc"], "unparsed": done["tail"]}
    phases = {}
    for phase, files, limit in (
        ("timing", KB_TIMING_SAMPLE, 150),
        ("diagnose", KB_DIAGNOSE_SAMPLE, 90),
    ):
        out = scratch / f"kb_{phase}"
        argv = [PY, "bench/kernelbench_sweep.py", "--kb", str(KB), "--out", str(out)]
        argv += ["--phase", phase, "--files", ",".join(files), "--budget-s", str(limit - 40)]
        run = _run(argv, limit)
        run.pop("stdout")
        found = out / "kernelbench_sweep.json"
        rows = json.loads(found.read_text())["rows"] if found.is_file() else []
        old = _recorded(phase)
        phases[phase] = {
            "run": run,
            "rows": [{**r, "recorded": old.get((r["level"], r["file"]))} for r in rows],
        }
    return {
        "inputs": {"timing": list(KB_TIMING_SAMPLE), "diagnose": list(KB_DIAGNOSE_SAMPLE)},
        "adversarial": adversarial_rows,
        "sweep": phases,
    }


SUITES: dict[str, Callable[[Path], dict[str, Any]]] = {
    "gpu-tests": gpu_tests,
    "conformance": conformance,
    "examples": examples,
    "adversarial": adversarial,
    "builds": builds,
    "kernelbench": kernelbench,
}


def run(name: str, results_root: Path) -> Path:
    """One suite, its results file written; the path."""
    from bench.results import write

    with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as tmp:
        start = time.monotonic()
        payload = SUITES[name](Path(tmp))
        payload["seconds"] = round(time.monotonic() - start, 1)
    return write(name, payload, results_root)
