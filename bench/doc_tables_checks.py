"""docs/BENCHMARKS.md's tables of the suites that check behaviour on the GPU: the tests, the
examples, the MCP session, the gaming variants and KernelBench. Each takes a suite's results
file (read) and returns its blocks of markdown."""

from __future__ import annotations

import re
from typing import Any

from bench.doc_format import cell, outcome, step_line, table

OUTCOMES = ("passed", "failed", "error", "skipped")


def tests(data: dict[str, Any]) -> list[str]:
    """gpu-tests and conformance: each pytest step's outcome and its tests counted."""
    rows, failed = [], []
    for name, step in data.get("steps", {}).items():
        cases = step.get("tests", [])
        counts = [sum(c["outcome"] == k for c in cases) for k in OUTCOMES]
        rows.append([f"`{name}`", outcome(step), *counts])
        failed += [c["test"] for c in cases if c["outcome"] in ("failed", "error")]
    blocks = [table(["step", "how it ended", *OUTCOMES], rows)]
    if failed:
        blocks.append("Failed: " + ", ".join(f"`{t}`" for t in failed) + ".")
    return blocks


def examples(data: dict[str, Any]) -> list[str]:
    rows = data.get("examples", [])
    ended = [f"not run ({r['not_run']})" if r.get("not_run") else outcome(r) for r in rows]
    body = table(
        ["example", "how it ended"], [[f"`{r['example']}`", e] for r, e in zip(rows, ended)]
    )
    blocks = [f"{data.get('passed', 0)} of {len(rows)} examples exited 0.", body]
    if data.get("demo"):
        blocks.append(f"The MCP demo (`python -m nsight_agent.demo`): {outcome(data['demo'])}.")
    return blocks


def _answers(transcript: str) -> list[list[str]]:
    """Each call of a demo transcript: the tool, how it answered, its JSON size, the text's
    first line."""
    rows = []
    for block in transcript.split("\n>>> ")[1:]:
        lines = block.splitlines()
        said = re.match(
            r"<<< (\w+); structured content (\d+) bytes", lines[1] if len(lines) > 1 else ""
        )
        first = lines[2].strip() if len(lines) > 2 else ""
        rows.append(
            [
                f"`{lines[0].split('(')[0]}`",
                said.group(1) if said else "-",
                said.group(2) if said else "-",
                first[:120] + ("..." if len(first) > 120 else ""),
            ]
        )
    return rows


def mcp_session(data: dict[str, Any]) -> list[str]:
    blocks = []
    if data.get("run"):
        blocks.append(f"`python -m nsight_agent.demo`: {outcome(data['run'])}.")
    rows = _answers(data.get("transcript", ""))
    blocks.append(table(["tool", "answer", "JSON bytes", "first line of its text"], rows))
    blocks.append("Every answer in full is in the results file (`calls`, `transcript`).")
    return blocks


def adversarial(data: dict[str, Any]) -> list[str]:
    """Per way of feeding inputs and method: how many variants got a verdict they may get."""
    blocks = [step_line("suite", data)] if data.get("run") else []
    rows, wrong = [], []
    inputs = {"vary": "new inputs every run", "fixed": "the same inputs (vary_inputs=false)"}
    for key, by_method in (data.get("results") or {}).items():
        for method, got in by_method.items():
            found = got.get("rows") or []
            allowed = sum(bool(r.get("ok")) for r in found)
            rows.append(
                [
                    inputs.get(key, key),
                    method,
                    f"{allowed} of {len(found)}",
                    got.get("seconds"),
                    got.get("error"),
                ]
            )
            wrong += [
                f"{r['variant']} ({method}, {key}): {r['verdict']}"
                for r in found
                if not r.get("ok")
            ]
    header = ["inputs", "method", "verdict allowed", "seconds", "error"]
    blocks.append(table(header, rows))
    if wrong:
        blocks.append("A verdict it may not get: " + "; ".join(wrong) + ".")
    return blocks


def kernelbench(data: dict[str, Any]) -> list[str]:
    if "skipped" in data:
        return [f"Skipped: {data['skipped']}."]
    rows = []
    for method, found in (data.get("adversarial") or {}).items():
        for r in (found.get("report") or {}).get("results", []):
            rows.append(
                [
                    f"`{r['variant']}`",
                    method,
                    r.get("compiled"),
                    r.get("correctness"),
                    r.get("speedup"),
                    r.get("verdict"),
                ]
            )
    blocks = []
    if rows:
        blocks.append(
            "KernelBench's adversarial kernels against level 1 problem 1 "
            "(`nsight-agent compare --kernelbench-result`):"
        )
        blocks.append(
            table(["kernel", "method", "compiled", "correct", "speedup", "verdict"], rows)
        )
    rows = []
    for phase, found in (data.get("sweep") or {}).items():
        blocks.append(step_line(f"{phase} sample", {**found, "results": found.get("rows") or None}))
        for r in found.get("rows", []):
            old = r.get("recorded") or {}
            rows.append(
                [
                    phase,
                    f"L{r['level']} `{r['file']}`",
                    r.get("status"),
                    r.get("seconds"),
                    r.get("detail"),
                    old.get("status"),
                    old.get("seconds"),
                    old.get("detail"),
                ]
            )
    if rows:
        blocks.append(
            "Each problem of the sample beside the recorded sweep's row of the same "
            "problem and phase (the kernelbench-sweep results file):"
        )
        header = [
            "phase",
            "problem",
            "status",
            "s",
            "result",
            "recorded",
            "recorded s",
            "recorded result",
        ]
        blocks.append(table(header, rows))
    return blocks


def _levels(summary: dict[str, Any]) -> str:
    return ", ".join(f"L{k} {v['ok']}/{v['ran']}" for k, v in summary.get("levels", {}).items())


def kernelbench_sweep(data: dict[str, Any]) -> list[str]:
    meta, summary = data.get("meta", {}), data.get("summary", {})
    rows, causes = [], []
    for phase, s in summary.items():
        rows.append(
            [
                phase,
                s.get("problems"),
                s.get("ran"),
                s.get("ok"),
                s.get("failed"),
                s.get("not_run"),
                f"{s.get('ok_pct')} %",
                _levels(s),
                f"{cell(s.get('median_s'))} / {cell(s.get('max_s'))}",
            ]
        )
        causes += [
            [phase, c["cause"], c["count"], ", ".join(c["problems"])] for c in s.get("causes", [])
        ]
    header = [
        "phase",
        "problems",
        "ran",
        "ok",
        "failed",
        "not run",
        "ok of ran",
        "ok by level",
        "s a problem (median / max)",
    ]
    blocks = [
        f"KernelBench at commit `{meta.get('kb_commit')}`: every problem of levels 1-3 on the "
        "timing path; seeded samples diagnosed (levels 1-2), read as a step (level 3) and "
        "compiled with torch.compile against KernelBench's own timing (levels 1-2).",
        table(header, rows),
    ]
    if causes:
        blocks.append(table(["phase", "why it failed", "problems", "which"], causes))
    shapes = []
    for phase in ("diagnose", "steps"):
        s = summary.get(phase, {})
        if "kernels_big" in s:
            shapes.append(
                [
                    phase,
                    s["kernels_big"],
                    s.get("kernels_big_no_cause"),
                    s.get("problems_with_uncaused"),
                ]
            )
    if shapes:
        header = ["phase", "kernels of >= 5 % of a step", "of them with no cause", "in problems"]
        blocks.append(table(header, shapes))
    agree = summary.get("compile", {}).get("agreement")
    if agree:
        blocks.append(
            f"torch.compile's speedup, ours against KernelBench's timing on the same GPU: "
            f"{agree['within_5pct']} of {agree['n']} within 5 % (median |ours/theirs - 1| "
            f"{agree['median_abs_dev_pct']} %, max {agree['max_abs_dev_pct']} %)."
        )
    return blocks
