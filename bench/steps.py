"""One step of a bench suite: a command under its own time limit, and what it left behind.

A step never takes its suite down: a command that fails or runs past its limit is recorded
(exit code, seconds, the last lines it printed) and the suite goes on to its next step. Past
its limit the step's whole process group is killed, so no profiled child keeps the GPU busy
under the next step.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.results import ROOT

PY = sys.executable
TAIL_CHARS = 1500


def command(
    argv: list[str], limit_s: float, cwd: Path = ROOT, env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Run ``argv`` in ``cwd`` with ``env`` added to this environment: its exit code (124 past
    its limit), seconds, the tail of what it printed and its whole stdout (also echoed, so a
    log of the suite shows where time went)."""
    start = time.monotonic()
    print(f"=== {' '.join(argv)} (limit {limit_s:.0f} s)", flush=True)
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: killed whole past the limit
    )
    try:
        out, err = proc.communicate(timeout=limit_s)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        rc = 124
    text = f"{out}\n{err}"
    print(text[-4000:], flush=True)
    seconds = round(time.monotonic() - start, 1)
    print(f"=== rc={rc} in {seconds} s", flush=True)
    return {
        "rc": rc,
        "seconds": seconds,
        "limit_s": limit_s,
        "tail": text[-TAIL_CHARS:],
        "stdout": out,
    }


def script(argv: list[str], limit_s: float, found: Path) -> dict[str, Any]:
    """A bench script that writes its figures to ``found`` (JSON): how it ran, and the figures
    (None where it wrote none, e.g. cut by its limit before its first write)."""
    run = command(argv, limit_s)
    run.pop("stdout")
    results = json.loads(found.read_text()) if found.is_file() else None
    return {"run": run, "results": results}


def json_in(text: str) -> Any:
    """The JSON document a command printed (the first ``{`` onwards)."""
    start = text.find("{")
    return json.JSONDecoder().raw_decode(text[start:])[0] if start >= 0 else None


SESSION_MARGIN_S = 80  # a GPU test's usual length: the one running at the deadline may finish
FAILURE_CHARS = 3000  # of a failed test's traceback kept in the results file


def junit(path: Path) -> list[dict[str, Any]]:
    """Each test case of a JUnit XML file: its id, outcome and seconds; a failure's or error's
    traceback (its end, where the assertion is) so that the results file says why."""
    if not path.is_file():
        return []
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome, why = "passed", None
        for tag in ("failure", "error", "skipped"):
            found = case.find(tag)
            if found is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                text = found.text or found.get("message") or ""
                why = text[-FAILURE_CHARS:] if tag != "skipped" else found.get("message")
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        row = {"test": name, "outcome": outcome, "seconds": float(case.get("time", 0))}
        cases.append({**row, "why": why} if why else row)
    return cases


def outcomes(text: str) -> list[dict[str, Any]]:
    """Each test's outcome as ``pytest -v`` printed it (no seconds)."""
    found = re.findall(r"\b(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (tests/\S+)", text)
    return [{"test": test, "outcome": outcome.lower(), "seconds": None} for outcome, test in found]


def pytest_step(
    scratch: Path,
    name: str,
    marker: str,
    paths: list[str],
    limit_s: float,
    margin_s: float = SESSION_MARGIN_S,
) -> dict[str, Any]:
    """One pytest run: its exit, seconds and each test case's outcome (JUnit XML; cut by its
    limit, pytest writes none, and each test's ``-v`` line says instead). pytest starts no
    test past the limit less ``margin_s`` (the step's longest test), so that it ends by itself
    and writes the XML with each failure's traceback."""
    xml = scratch / f"{name}.xml"
    workers = ["-n", "6"] if marker != "gpu_fault" else []  # ncu runs queue on the GPU's lock
    session = f"--session-timeout={max(1, int(limit_s - margin_s))}"
    argv = [PY, "-m", "pytest", "-m", marker, *workers, "-v", "-rfEX", "--tb=short", session]
    step = command([*argv, f"--junitxml={xml}", *paths], limit_s)
    tests = junit(xml) or outcomes(step.pop("stdout"))
    step.pop("stdout", None)
    return {**step, "tests": tests}


def counted(steps: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The steps with the suite's passed, failed and errored tests counted."""
    cases = [c for step in steps.values() for c in step["tests"]]
    counts = {k: sum(c["outcome"] == k for c in cases) for k in ("passed", "failed", "error")}
    return {"steps": steps, "counts": counts}
