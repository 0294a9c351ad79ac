"""Suites that run the project's own GPU tests, examples and MCP demo on the GPU machine."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from bench.results import ROOT
from bench.steps import PY, command, counted, pytest_step

# The matrix's ncu rows and the output judgement run a full ncu profile and a timing run per
# case: a suite of their own, so that each suite fits within one 600 s command.
JUDGEMENT_TESTS = ("tests/test_conformance.py", "tests/test_output_judgement.py")
GPU_TESTS_LIMITS = {"gpu": 480}
# The fault tests, a suite of their own: beside the gpu step they did not fit one 600 s command
# with each step's margin. They run one at a time, the longest (a hanging kernel killed) about
# 31 s on an H100 and the four 81-106 s together (bench/results/gpu-tests): pytest's session
# timeout (the limit less the margin) must come after the last, or it fails a passing run.
GPU_FAULTS_LIMITS = {"gpu_fault": 150}
FAULT_MARGIN_S = 35
CONFORMANCE_LIMITS = {"conformance": 480}
EXAMPLE_LIMIT_S = 120
EXAMPLES_LIMITS = {"examples": 420}  # all of them: no example starts past this
EXAMPLES = sorted((ROOT / "examples").glob("[0-9][0-9]_*.py"))
MCP_SESSION_LIMITS = {"demo": 240}


def gpu_tests(scratch: Path) -> dict[str, Any]:
    """The gpu-marked tests but the faulting ones (gpu-faults) and the judgement's
    (conformance): each test's outcome and seconds."""
    ignore = [f"--ignore={t}" for t in JUDGEMENT_TESTS]
    limit = GPU_TESTS_LIMITS["gpu"]
    steps = {
        "gpu": pytest_step(scratch, "gpu", "gpu and not gpu_fault", [*ignore, "tests/"], limit)
    }
    return {"inputs": {"markers": ["gpu"], "ignored": list(JUDGEMENT_TESTS)}, **counted(steps)}


def gpu_faults(scratch: Path) -> dict[str, Any]:
    """The gpu_fault tests, one at a time (they fault or hang the GPU on purpose; beside other
    ncu runs they broke them): each test's outcome and seconds."""
    limit = GPU_FAULTS_LIMITS["gpu_fault"]
    steps = {
        "gpu_fault": pytest_step(
            scratch, "gpu_fault", "gpu_fault", ["tests/"], limit, FAULT_MARGIN_S
        )
    }
    return {"inputs": {"markers": ["gpu_fault"]}, **counted(steps)}


def conformance(scratch: Path) -> dict[str, Any]:
    """The conformance matrix's rows under ncu against the timing path's answer, and wrong
    outputs judged on both methods (the gpu rows of those two test files)."""
    limit = CONFORMANCE_LIMITS["conformance"]
    steps = {
        "conformance": pytest_step(scratch, "conformance", "gpu", list(JUDGEMENT_TESTS), limit)
    }
    return {"inputs": {"tests": list(JUDGEMENT_TESTS)}, **counted(steps)}


def examples(scratch: Path) -> dict[str, Any]:
    """Every examples/NN_*.py, each in a scratch folder of its own: exit code and seconds."""
    rows: list[dict[str, Any]] = []
    deadline = time.monotonic() + EXAMPLES_LIMITS["examples"]
    for example in EXAMPLES:
        left = deadline - time.monotonic()
        if left < 10:
            rows.append({"example": example.name, "rc": None, "not_run": "the suite's limit"})
            continue
        folder = scratch / example.stem
        folder.mkdir(parents=True, exist_ok=True)
        env = {"NSIGHT_AGENT_EXAMPLE_OUT": str(folder)}
        done = command([PY, str(example)], min(EXAMPLE_LIMIT_S, left), cwd=folder, env=env)
        done.pop("stdout")
        rows.append({"example": example.name, **done})
    return {
        "inputs": {"examples": [r["example"] for r in rows]},
        "examples": rows,
        "passed": sum(r["rc"] == 0 for r in rows),
    }


def mcp_session(scratch: Path) -> dict[str, Any]:
    """The MCP demo: a real client over stdio calls each tool as an agent would; every answer
    kept, and the transcript it printed."""
    calls_file = scratch / "calls.json"
    env = {"NSIGHT_AGENT_DEMO_JSON": str(calls_file)}
    run = command([PY, "-m", "nsight_agent.demo"], MCP_SESSION_LIMITS["demo"], env=env)
    transcript = run.pop("stdout")
    calls = json.loads(calls_file.read_text()) if calls_file.is_file() else []
    return {
        "inputs": {"command": "python -m nsight_agent.demo"},
        "run": run,
        "calls": calls,
        "transcript": transcript,
    }
