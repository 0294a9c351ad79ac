"""A sweep over KernelBench's problems, read from a pinned checkout of the
public KernelBench repository (``--kb``, e.g. ``.kb``; its commit in ``<kb>/COMMIT``), never
copied into this one. Four phases, each usable alone (``--phase``, repeatable):

- timing: every problem of ``--levels`` through ``profile_kernel`` on the timing path, one
  call per problem (the problem as it is: language and configs left out); the levels are
  taken in turn (1, 2, 3, 1, ...), problems in id order within each;
- diagnose: a seeded sample of level 1-2 problems through ``diagnose_kernel`` (one ncu run of
  the cheap sections; ``--deep``: of every section the checks read, as the tool runs it); per
  problem the first kernel's headline and the kernels of
  >= 5 % of the step whose diagnosis names no cause;
- steps: a seeded sample of level 3 models through the same diagnosis, read as a step;
- compile: a seeded sample of level 1-2 problems with ``torch.compile(Model)`` as the
  candidate, through ``compare_variants`` (timing path) and, side by side in the same run on
  the same GPU, through KernelBench's own ``time_execution_with_cuda_event`` (the peer,
  imported from the checkout in a subprocess per problem); the two speedups and their ratio.
  KernelBench's timing counts as honest for a problem when both its times are at least
  ``--honest-min-ms``: it brackets one call with events, so below that launch and host time
  weigh in that ours (GPU activity only) leaves out.

Every call goes through the use cases the MCP server uses (``service``), on one serving
session (its executor and warm workers): a problem runs in the engine's worker and harness
processes, so one problem's CUDA error does not reach this process or the next problem. This
process never touches CUDA; only the peer's subprocesses do.

A global budget (``--budget-s``) stops new problems from starting; the rest are recorded as
"not run (budget)", and a problem started late gets at most half of what is left (a failure
from a limit so shortened says "budget-limited"). The JSON (every row and a summary) and a
markdown table are rewritten after every problem, so a run cut off
still keeps what ran. Rows already in ``DIR/kernelbench_sweep.json`` are kept (a new row
replaces its problem's old one); ``--skip N`` starts each phase at its N-th problem (to go
on where a call stopped), ``--files A.py,B.py`` runs only those problems (e.g. again, after a
fix), ``--shard K/N`` only every N-th from the K-th (N processes, each on a GPU of its own:
``CUDA_VISIBLE_DEVICES``) and ``--merge`` combines the JSON of several calls::

    python3 bench/kernelbench_sweep.py --kb .kb --out kb --phase timing --levels 2,3 \\
        --budget-s 420
    python3 bench/kernelbench_sweep.py --out DIR --merge A.json B.json --results bench/results
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import hashlib
import importlib.metadata
import importlib.util
import itertools
import json
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nsight_agent.service.measure import Measuring, RunResult
    from nsight_agent.views.diagnosis import ReportDiagnosis

# nsight_agent is imported inside the phases, not here: the peer's subprocess runs this file
# too (--peer-one), and it should load torch and KernelBench's timing module, not our engine.

ROOT = Path(__file__).resolve().parent.parent
PHASES = ("timing", "diagnose", "steps", "compile")
JSON_NAME, MD_NAME = "kernelbench_sweep.json", "kernelbench_sweep.md"
PEER_MARK = "KB_SWEEP_PEER "  # the peer's result line, among KernelBench's own prints
SHARE_PCT = 5.0  # a kernel of this share of the step or more should have a cause
DIAGNOSED = 20  # kernels diagnosed in full: at most 20 can each hold >= 5 % of a step
AGREE = 0.05  # speedup agreement target: |ours / theirs - 1| <= 5 %
MIN_TIMEOUT_S = 30.0  # a problem started near the budget's end still gets this long
NOT_RUN = "not run (budget)"
TIMED_OUT = re.compile(r"ran past|timeout|timed out", re.IGNORECASE)

# ModelNew of the compile candidate: the problem's Model under torch.compile (default mode).
# The harness seeds before building ModelNew, so Model(*args) gets the reference's weights.
COMPILED_TAIL = '''

import torch


class ModelNew(torch.nn.Module):
    """The problem's Model under torch.compile (default mode): a public candidate."""

    def __init__(self, *init_inputs):
        super().__init__()
        self.compiled = torch.compile(Model(*init_inputs))

    def forward(self, *inputs):
        return self.compiled(*inputs)
'''


def compiled_candidate(problem_source: str) -> str:
    """The problem's source with a ``ModelNew`` that compiles its ``Model``."""
    return problem_source.rstrip("\n") + "\n" + COMPILED_TAIL


# --- problems -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    level: int
    path: Path

    @property
    def file(self) -> str:
        return self.path.name


def _by_number(path: Path) -> tuple[int, str]:
    """KernelBench's files start with their problem id: 2_... before 10_..."""
    found = re.match(r"(\d+)_", path.name)
    return (int(found.group(1)) if found else 1 << 30, path.name)


def level_problems(kb: Path, level: int) -> list[Problem]:
    folder = kb / "KernelBench" / f"level{level}"
    return [Problem(level, p) for p in sorted(folder.glob("*.py"), key=_by_number)]


def sample(problems: list[Problem], n: int, seed: int, salt: str) -> list[Problem]:
    """``n`` problems drawn with ``seed`` (each phase its own stream), in problem order."""
    if n >= len(problems):
        return list(problems)
    chosen = set(random.Random(f"{seed}-{salt}").sample(range(len(problems)), n))
    return [p for i, p in enumerate(problems) if i in chosen]


# --- rows, causes, the summary ----------------------------------------------------------------


class Failed(Exception):
    """A failure whose message is already its cause (e.g. which side of a comparison)."""


def cause_of(err: BaseException) -> str:
    """The exception's type and the first line of its message."""
    if isinstance(err, Failed):
        return str(err)[:600]
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0] if lines else ''}".strip()[:300]


def cause_group(cause: str) -> str:
    """A cause without what differs between problems (line numbers, run ids, numbers, the
    exception's own text), so equal failures count together: "SourceError: setup failed:
    RuntimeError" for "SourceError: setup failed (source line 21): RuntimeError: boom"."""
    text = re.sub(r"\s*\((?:source line|line|run)\b[^)]*\)", "", cause)
    text = re.sub(r"\d+(?:\.\d+)?", "N", text).split(". ")[0]
    return ": ".join(part.strip() for part in text.split(":")[:3])[:120]


def _key(row: dict[str, Any]) -> tuple[str, int, str]:
    return (row["phase"], int(row["level"]), row["file"])


def merge_rows(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``old`` with each problem's row replaced by its row in ``new``, except that a problem
    not run in ``new`` keeps a row of ``old`` that ran."""
    rows = {_key(r): r for r in old}
    for r in new:
        kept = rows.get(_key(r))
        if r["status"] == "not_run" and kept is not None and kept["status"] != "not_run":
            continue
        rows[_key(r)] = r
    return sorted(rows.values(), key=lambda r: (PHASES.index(r["phase"]), r["level"], r["index"]))


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def _agreement(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ratios = [r["ratio"] for r in rows if r.get("ratio") is not None]
    if not ratios:
        return {"n": 0}
    off = [abs(x - 1.0) for x in ratios]
    return {
        "n": len(ratios),
        "median_abs_dev_pct": round(100 * statistics.median(off), 2),
        "max_abs_dev_pct": round(100 * max(off), 2),
        "within_5pct": sum(d <= AGREE for d in off),
        "within_5pct_share": round(sum(d <= AGREE for d in off) / len(off), 3),
    }


def phase_summary(phase: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    ran = [r for r in rows if r["status"] != "not_run"]
    ok = [r for r in ran if r["status"] == "ok"]
    failed = [r for r in ran if r["status"] == "failed"]
    causes = Counter(cause_group(r["cause"] or "") for r in failed)
    out: dict[str, Any] = {
        "problems": len(rows),
        "ran": len(ran),
        "ok": len(ok),
        "failed": len(failed),
        "not_run": len(rows) - len(ran),
        "ok_pct": round(100 * len(ok) / len(ran), 1) if ran else None,
        "median_s": _median([r["seconds"] for r in ran if r.get("seconds") is not None]),
        "max_s": max((r["seconds"] for r in ran if r.get("seconds") is not None), default=None),
        "causes": [
            {
                "cause": cause,
                "count": count,
                "problems": [
                    f"L{r['level']}/{r['file']}" for r in failed if cause_group(r["cause"]) == cause
                ],
            }
            for cause, count in causes.most_common()
        ],
        "levels": {
            str(level): {
                "ran": sum(r["level"] == level for r in ran),
                "ok": sum(r["level"] == level for r in ok),
            }
            for level in sorted({r["level"] for r in rows})
        },
    }
    if phase in ("diagnose", "steps"):
        out["kernels_big"] = sum(r.get("kernels_big") or 0 for r in ok)
        out["kernels_big_no_cause"] = sum(r.get("no_cause_count") or 0 for r in ok)
        out["problems_with_uncaused"] = sum(bool(r.get("no_cause_count")) for r in ok)
    if phase == "compile":
        out["agreement"] = _agreement(ok)
        out["agreement_honest"] = _agreement([r for r in ok if r.get("honest")])
    return out


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        phase: phase_summary(phase, [r for r in rows if r["phase"] == phase])
        for phase in PHASES
        if any(r["phase"] == phase for r in rows)
    }


# --- the markdown table ---------------------------------------------------------------------


def _cell(value: Any, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}{unit}"
    return f"{value}{unit}".replace("|", "\\|")  # a cause's text must not end the cell


def markdown(meta: dict[str, Any], rows: list[dict[str, Any]], summary: dict[str, Any]) -> str:
    lines = [
        "### KernelBench sweep: `bench/kernelbench_sweep.py`",
        "",
        f"KernelBench commit {meta.get('kb_commit') or '?'}; ours {meta.get('commit') or '?'}; "
        f"{meta.get('gpu') or 'no GPU'}; {meta.get('date', '?')}.",
        "",
        "| phase | level | problems | ran | ok | failed | not run | % ok | s per problem "
        "(median / max) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for phase, s in summary.items():
        for level, counts in s["levels"].items():
            of_level = [r for r in rows if r["phase"] == phase and str(r["level"]) == level]
            ran = [r for r in of_level if r["status"] != "not_run"]
            secs = [r["seconds"] for r in ran if r.get("seconds") is not None]
            pct = round(100 * counts["ok"] / counts["ran"], 1) if counts["ran"] else None
            lines.append(
                f"| {phase} | {level} | {len(of_level)} | {counts['ran']} | {counts['ok']} | "
                f"{counts['ran'] - counts['ok']} | {len(of_level) - counts['ran']} | "
                f"{_cell(pct, ' %')} | {_cell(_median(secs))} / {_cell(max(secs, default=None))} |"
            )
    failures = [(phase, c) for phase, s in summary.items() for c in s["causes"]]
    if failures:
        lines += ["", "| phase | cause | count | problems |", "| --- | --- | --- | --- |"]
        for phase, c in failures:
            names = ", ".join(c["problems"])
            lines.append(f"| {phase} | {_cell(c['cause'])} | {c['count']} | {names} |")
    for phase in ("diagnose", "steps"):
        if phase in summary:
            s = summary[phase]
            lines += [
                "",
                f"{phase}: {s['kernels_big']} kernels of >= {SHARE_PCT:g} % of a step in "
                f"{s['ok']} problems; {s['kernels_big_no_cause']} with no cause (neither "
                f"their own nor a step cause), in {s['problems_with_uncaused']} problems.",
            ]
            lines += _uncaused_lines([r for r in rows if r["phase"] == phase])
    if "compile" in summary:
        lines += _compile_lines([r for r in rows if r["phase"] == "compile"], summary["compile"])
    return "\n".join(lines) + "\n"


def _uncaused_lines(rows: list[dict[str, Any]]) -> list[str]:
    found = [(r, k) for r in rows for k in r.get("uncaused") or [] if not k["step_cause"]]
    if not found:
        return []
    lines = ["", "| problem | kernel | op | share | bound | headline |", "| --- " * 6 + "|"]
    for r, k in found:
        lines.append(
            f"| L{r['level']}/{r['file']} | `{_cell(k['kernel'][:50])}` | {_cell(k['op'])} | "
            f"{_cell(k['share_pct'], ' %')} | {k['bound']} | {_cell(k['headline'][:90])} |"
        )
    return lines


def _compile_lines(rows: list[dict[str, Any]], s: dict[str, Any]) -> list[str]:
    lines = [
        "",
        "| problem | ours: ref / compiled (us) | speedup (of medians) | verdict | KernelBench: "
        "ref / compiled (us) | speedup | ours / theirs | honest |",
        "| --- " * 8 + "|",
    ]

    def us(value: float | None, scale: float) -> str:
        return _cell(None if value is None else value * scale)

    for r in rows:
        if r["status"] == "not_run":
            continue
        lines.append(
            f"| L{r['level']}/{r['file']} | {us(r.get('ours_ref_ns'), 1e-3)} / "
            f"{us(r.get('ours_compiled_ns'), 1e-3)} | {_cell(r.get('ours_speedup'))} "
            f"({_cell(r.get('ours_median_speedup'))}) | "
            f"{r.get('ours_verdict') or '-'} | {us(r.get('kb_ref_ms'), 1e3)} / "
            f"{us(r.get('kb_compiled_ms'), 1e3)} | {_cell(r.get('kb_speedup'))} | "
            f"{_cell(r.get('ratio'))} | {'yes' if r.get('honest') else 'no'} |"
        )
    for label, a in (("all", s["agreement"]), ("honest", s["agreement_honest"])):
        if a["n"]:
            lines.append(
                f"\nSpeedup agreement ({label}, n={a['n']}): median |ours/theirs - 1| = "
                f"{a['median_abs_dev_pct']} %, max {a['max_abs_dev_pct']} %; "
                f"{a['within_5pct']} of {a['n']} within 5 %."
            )
    return lines


# --- the sweep's state --------------------------------------------------------------------------


class Sweep:
    """The rows so far, the budget, and the files rewritten after every problem."""

    def __init__(self, out: Path, budget_s: float | None, meta: dict[str, Any]) -> None:
        self.out, self.budget_s, self.meta = out, budget_s, meta
        self.start = time.monotonic()
        self.cut = False
        self.runs_root: Path | None = None  # where the runs are: their stage seconds
        self.old: list[dict[str, Any]] = []
        self.new: list[dict[str, Any]] = []
        previous = out / JSON_NAME
        if previous.exists():
            with contextlib.suppress(ValueError, KeyError):
                self.old = list(json.loads(previous.read_text())["rows"])

    def left(self) -> float | None:
        return None if self.budget_s is None else self.budget_s - self.elapsed()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def spent(self) -> bool:
        left = self.left()
        return left is not None and left <= 0

    def timeout(self, cap: float) -> float:
        """A limit of the current problem: ``cap``, or half of what is left of the budget (a
        request's limit holds for each of its stages, pre-flight and measurement), at least
        30 s; ``cut`` says a limit of the current problem was shortened so."""
        left = self.left()
        limit = cap if left is None else max(MIN_TIMEOUT_S, min(cap, left / 2))
        self.cut = self.cut or limit < cap
        return limit

    def record(self, row: dict[str, Any], total: int) -> None:
        self.new.append(row)
        detail = row.get("cause") or row.get("detail") or ""
        print(
            f"[{self.elapsed():7.1f} s] {row['phase']} {row['index'] + 1}/{total} "
            f"L{row['level']} {row['file']}: {row['status']} "
            f"({_cell(row.get('seconds'), ' s')}) {detail}"[:400],
            flush=True,
        )
        self.write()

    def rows(self) -> list[dict[str, Any]]:
        return merge_rows(self.old, self.new)

    def write(self) -> None:
        write_outputs(self.out, self.meta, self.rows())


def write_outputs(out: Path, meta: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The JSON and the markdown, each written whole (a file replaced, never half written)."""
    summary = summarize(rows)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in (
        (JSON_NAME, json.dumps({"meta": meta, "summary": summary, "rows": rows}, indent=1)),
        (MD_NAME, markdown(meta, rows, summary)),
    ):
        tmp = out / f".{name}.tmp"
        tmp.write_text(text)
        os.replace(tmp, out / name)
    return summary


def new_row(phase: str, index: int, problem: Problem) -> dict[str, Any]:
    return {
        "phase": phase,
        "index": index,
        "level": problem.level,
        "file": problem.file,
        "status": "not_run",
        "cause": NOT_RUN,
        "seconds": None,
    }


def each_problem(
    sweep: Sweep, phase: str, problems: list[Problem], args: argparse.Namespace
) -> Iterator[tuple[dict[str, Any], Problem]]:
    """Each problem's fresh row, to fill, from the ``--skip``-th on (only the ``--files``
    named, when given; a row keeps its place in the whole phase); once the budget is spent
    the rest are recorded as not run. The caller records the row it was given."""
    total = len(problems)
    only = {f.strip() for f in (args.files or "").split(",") if f.strip()}
    shard, shards = args.shard
    for index, problem in enumerate(problems):
        if index < args.skip or (only and problem.file not in only) or index % shards != shard:
            continue
        row = new_row(phase, index, problem)
        if sweep.spent():
            sweep.record(row, total)
            continue
        yield row, problem


def attempt(
    sweep: Sweep, row: dict[str, Any], total: int, fn: Callable[[], dict[str, Any]]
) -> None:
    """Run one problem's work; its fields (or its failure's cause) and wall seconds go into
    ``row``, which is recorded either way."""
    start = time.monotonic()
    sweep.cut = False
    try:
        row.update(status="ok", cause=None)
        row.update(fn())
    except Exception as err:  # every failure is a row with its cause, never the sweep's end
        cause = cause_of(err)
        if sweep.cut and TIMED_OUT.search(cause):  # said first, so such failures group apart
            cause = f"budget-limited: {cause}"
        row.update(status="failed", cause=cause)
        # the stages that ended before it failed: where a killed run's time went
        row.setdefault("stage_seconds", _stage_seconds_of(sweep, getattr(err, "run_id", None)))
    row["seconds"] = round(time.monotonic() - start, 3)
    sweep.record(row, total)


# --- the phases ---------------------------------------------------------------------------------


def _passed(run: RunResult) -> None:
    if run.status != "passed":
        failure = run.failure or {}
        raise RuntimeError(
            f"run {run.run_id} {run.status} at {failure.get('stage')}: {failure.get('message')}"
        )


def _time_ns(run: RunResult, variant: str, column: str = "AvgValue") -> float | None:
    from nsight_agent.request import TIME_METRIC

    frame = run.processed
    rows = frame[(frame["Metric"] == TIME_METRIC) & (frame["Annotation"] == variant)]
    return float(rows[column].iloc[0]) if len(rows) and column in rows else None


def _stage_seconds_of(sweep: Sweep, run_id: str | None) -> dict[str, float] | None:
    """A run's stage seconds by its id, in the sweep's runs folder (a diagnosis and a failure
    carry the id, not the run)."""
    from nsight_agent.judge.builds import stage_seconds_of

    if not run_id or sweep.runs_root is None:
        return None
    return stage_seconds_of(sweep.runs_root / run_id)


def timing_phase(
    sweep: Sweep, where: Measuring, problems: list[Problem], args: argparse.Namespace
) -> None:
    from nsight_agent.judge.builds import stage_seconds_of
    from nsight_agent.service.profile import profile

    def one(problem: Problem) -> dict[str, Any]:
        run = profile(
            where,
            "timing",
            source=problem.path.read_text(),
            runs=args.runs,
            timeout_s=sweep.timeout(args.problem_timeout_s),
        )
        _passed(run)
        time_ns = _time_ns(run, "ref")
        if time_ns is None:
            raise RuntimeError(f"run {run.run_id} has no time for 'ref'")
        return {
            "run_id": run.run_id,
            "time_ns": time_ns,
            "runs": _time_ns(run, "ref", "NumRuns"),
            "stage_seconds": stage_seconds_of(run.run_dir),
            "detail": f"{time_ns / 1e3:.4g} us",
        }

    for row, problem in each_problem(sweep, "timing", problems, args):
        attempt(sweep, row, len(problems), functools.partial(one, problem))


def diagnosis_fields(d: ReportDiagnosis) -> dict[str, Any]:
    """The first kernel's headline and cause; the kernels of >= 5 % of the step and those of
    them with no cause of their own, each saying whether a step cause names its group."""
    step_causes = (d.step.causes or []) if d.step else []

    def covered(k: Any) -> bool:  # as the view's headline decides it (views/diagnosis.pointed)
        group = k.op or k.diagnosis.kernel[:60]
        return any(c.covers(k.diagnosis.kernel, group) for c in step_causes)

    big = [k for k in d.kernels if (k.share_pct or 0.0) >= SHARE_PCT]
    uncaused = [
        {
            "kernel": k.diagnosis.kernel,
            "op": k.op,
            "share_pct": k.share_pct,
            "bound": k.diagnosis.bound.bound,
            "headline": k.diagnosis.headline[:200],
            "step_cause": covered(k),
        }
        for k in big
        if not k.diagnosis.causes
    ]
    first = d.kernels[0].diagnosis if d.kernels else None
    return {
        "run_id": d.run_id,
        "kernels_total": d.kernels_total,
        "headline": first.headline if first else None,
        "top_cause": first.causes[0].id if first and first.causes else None,
        "kernels_big": len(big),
        "uncaused": uncaused,
        "no_cause_count": sum(not u["step_cause"] for u in uncaused),
        "detail": (first.headline[:120] if first else "no kernel"),
    }


def step_fields(d: ReportDiagnosis) -> dict[str, Any]:
    step = d.step
    if step is None:  # a single kernel: the kernel is the step
        return {
            "groups": 1 if d.kernels else 0,
            "top_group_share_pct": 100.0 if d.kernels else None,
        }
    top = step.groups[0] if step.groups else None
    return {
        "groups": len(step.groups),
        "rest_pct": step.rest_pct,
        "launches": step.launches,
        "gpu_us": step.gpu_us,
        "top_group": top.group if top else None,
        "top_group_share_pct": top.share_pct if top else None,
        "step_causes": [c.id for c in step.causes or []],
        "sampled": d.sampled,
    }


def diagnose_phase(
    sweep: Sweep, where: Measuring, problems: list[Problem], args: argparse.Namespace, phase: str
) -> None:
    from nsight_agent.service.diagnose import diagnose_source

    def one(problem: Problem) -> dict[str, Any]:
        fields = {
            "source": problem.path.read_text(),
            "timeout_s": sweep.timeout(args.problem_timeout_s),
        }
        d = diagnose_source(fields, where, deep=args.deep, limit=DIAGNOSED)
        found = diagnosis_fields(d) | {"stage_seconds": _stage_seconds_of(sweep, d.run_id)}
        if phase == "steps":
            found |= step_fields(d)
            sampled = found.get("sampled") or ""
            how = (
                "; sampled, not mapped"
                if "not mapped" in sampled
                else "; sampled"
                if sampled
                else ""
            )
            found["detail"] = f"{found['groups']} groups, causes {found.get('step_causes')}{how}"
        return found

    for row, problem in each_problem(sweep, phase, problems, args):
        attempt(sweep, row, len(problems), functools.partial(one, problem))


def compile_phase(
    sweep: Sweep, where: Measuring, problems: list[Problem], args: argparse.Namespace
) -> None:
    """Ours and KernelBench's timing of the same problem, one after the other, the side that
    goes first alternating from problem to problem."""
    from nsight_agent.judge.builds import stage_seconds_of
    from nsight_agent.service.profile import profile
    from nsight_agent.service.summaries import compare_summary

    def ours(problem: Problem) -> dict[str, Any]:
        source = problem.path.read_text()
        start = time.monotonic()
        run = profile(
            where,
            "timing",
            source=source,
            variants=[{"name": "ref"}, {"name": "compiled", "source": compiled_candidate(source)}],
            correctness=args.correctness,
            runs=args.runs,
            timeout_s=sweep.timeout(args.problem_timeout_s),
        )
        _passed(run)
        summary = compare_summary(run)
        overall = summary.overall["compiled"]
        timings = summary.configs[0].variants if summary.configs else {}
        check = timings["compiled"].check if "compiled" in timings else None
        # beside the verdict's means: one slow call (a recompile) moves a mean, not a median
        ref_median = _time_ns(run, "ref", "MedianValue")
        new_median = _time_ns(run, "compiled", "MedianValue")
        return {
            "ours_median_speedup": ref_median / new_median if ref_median and new_median else None,
            "run_id": run.run_id,
            "ours_s": round(time.monotonic() - start, 2),
            "ours_ref_ns": _time_ns(run, "ref"),
            "ours_compiled_ns": _time_ns(run, "compiled"),
            "ours_speedup": overall.geomean_speedup,
            "ours_verdict": overall.verdict,
            "ours_check": check,
            "ours_stage_seconds": stage_seconds_of(run.run_dir),
        }

    def theirs(problem: Problem) -> dict[str, Any]:
        start = time.monotonic()
        peer = run_peer(problem, args, sweep.timeout(args.peer_timeout_s))
        ref, comp = peer["ref"]["mean_ms"], peer["compiled"]["mean_ms"]
        return {
            "kb_s": round(time.monotonic() - start, 2),
            "kb_ref_ms": ref,
            "kb_compiled_ms": comp,
            "kb_speedup": ref / comp if comp > 0 else None,
            "kb_trials": peer["ref"]["trials"],
            "kb_device": peer.get("device"),
        }

    def one(problem: Problem, row: dict[str, Any]) -> dict[str, Any]:
        """Both sides into ``row`` (a side that fails leaves the other's numbers there)."""
        index = row["index"]
        row["first"] = "ours" if index % 2 == 0 else "kernelbench"
        errors = []
        sides = [("ours", ours), ("kernelbench", theirs)]
        for side, fn in sides if index % 2 == 0 else reversed(sides):
            try:
                row.update(fn(problem))
            except Exception as err:  # the other side still runs: its time is still worth having
                errors.append(f"{side}: {cause_of(err)}")
        if row.get("ours_verdict") and row.get("ours_speedup") is None:
            errors.append(f"ours: compiled {row['ours_verdict']}: {row.get('ours_check')}")
        ours_x, kb_x = row.get("ours_speedup"), row.get("kb_speedup")
        if ours_x and kb_x:
            row["ratio"] = ours_x / kb_x
            row["honest"] = min(row["kb_ref_ms"], row["kb_compiled_ms"]) >= args.honest_min_ms
            row["detail"] = f"ours {ours_x:.3g}x, KernelBench {kb_x:.3g}x"
        if errors:
            raise Failed("; ".join(errors))
        return {}

    for row, problem in each_problem(sweep, "compile", problems, args):
        attempt(sweep, row, len(problems), functools.partial(one, problem, row))


def run_peer(problem: Problem, args: argparse.Namespace, timeout: float) -> dict[str, Any]:
    """KernelBench's timing of one problem in a subprocess of its own (a CUDA error there
    ends that process, not the sweep); its result is the line marked ``PEER_MARK``."""
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--peer-one",
        str(problem.path),
        "--kb",
        str(args.kb),
        "--seed",
        str(args.seed),
        "--peer-trials",
        str(args.peer_trials),
        "--peer-warmup",
        str(args.peer_warmup),
    ]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as err:
        raise TimeoutError(f"KernelBench's timing ran past {timeout:.0f} s") from err
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(PEER_MARK):
            found: dict[str, Any] = json.loads(line[len(PEER_MARK) :])
            if "error" in found:
                raise Failed(found["error"])
            return found
    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
    raise RuntimeError(f"KernelBench's timing exited {done.returncode}: {tail}")


# --- the peer: KernelBench's own timing, in its subprocess ---------------------------------------


def load_file(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # as an import would: dataclasses and pickling look it up
    spec.loader.exec_module(module)
    return module


def kb_timing(kb: Path) -> ModuleType:
    """KernelBench's ``timing.py`` from the checkout. Loaded as a file, not as
    ``kernelbench.timing``: the package's ``__init__`` imports its LLM API clients (openai,
    litellm, dotenv), which a GPU machine need not have and the timing does not use."""
    return load_file("kernelbench_timing", kb / "src" / "kernelbench" / "timing.py")


def peer_one(args: argparse.Namespace) -> int:
    """Time ``Model`` and ``torch.compile(Model)`` of one problem with KernelBench's
    ``time_execution_with_cuda_event`` on the current GPU; print the result line."""
    try:
        import torch

        timing = kb_timing(args.kb)
        problem = load_file("kb_problem", Path(args.peer_one))
        device = torch.device("cuda", torch.cuda.current_device())

        def on_device(values: Any) -> list[Any]:
            return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]

        found: dict[str, Any] = {"device": torch.cuda.get_device_name(device)}
        for name in ("ref", "compiled"):
            with torch.no_grad():  # as KernelBench's measure_ref_program_time
                torch.manual_seed(args.seed)
                inputs = on_device(problem.get_inputs())
                torch.manual_seed(args.seed)
                init = getattr(problem, "get_init_inputs", list)
                model = problem.Model(*on_device(init())).to(device)
                if name == "compiled":
                    model = torch.compile(model)
                times = timing.time_execution_with_cuda_event(
                    model,
                    inputs,
                    num_warmup=args.peer_warmup,
                    num_trials=args.peer_trials,
                    verbose=False,
                    device=device,
                )
            found[name] = {"mean_ms": statistics.fmean(times), "trials": len(times)}
            del model, inputs
            torch.cuda.empty_cache()
    except Exception as err:
        found = {"error": cause_of(err)}
    print(PEER_MARK + json.dumps(found), flush=True)
    return 0 if "error" not in found else 1


# --- the run ------------------------------------------------------------------------------------


def _quiet(cmd: list[str]) -> str | None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.strip().splitlines()
    return lines[-1].strip() if done.returncode == 0 and lines else None


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def source_fingerprint(root: Path = ROOT) -> str:
    """What code ran, from its files: the package's sources and the harness templates, hashed
    by path and content. A commit read from git can be stale where the tree was copied
    without its history (a copy's git can name an older commit than its files);
    ``--fingerprint`` at a checkout prints the value to match."""
    digest = hashlib.sha256()
    files = [*(root / "nsight_agent").rglob("*.py"), *(root / "templates").glob("*")]
    for path in sorted(f for f in files if f.is_file()):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def run_meta(args: argparse.Namespace, phases: list[str]) -> dict[str, Any]:
    kb_commit = args.kb / "COMMIT"
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _quiet(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]),
        "source": source_fingerprint(),
        "kb": _portable(str(args.kb)),
        "kb_commit": kb_commit.read_text().strip()[:12] if kb_commit.exists() else None,
        "gpu": _quiet(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]),
        "ncu": _quiet(["ncu", "--version"]),
        "python": platform.python_version(),
        "torch": _version("torch"),
        "phases": phases,
        "argv": [_portable(a) for a in args.argv],
    }


def _portable(text: str) -> str:
    """An absolute path as its last two parts (``kb_diag/kernelbench_sweep.json``): the JSON
    is committed, and neither this machine's folders nor the device's belong in it."""
    path = Path(text)
    return str(Path(*path.parts[-2:])) if path.is_absolute() and len(path.parts) > 2 else text


def _portable_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """``meta`` with its paths (argv, merged parts, recursively) made portable."""
    out: dict[str, Any] = dict(meta)
    for key in ("argv", "merged"):
        if isinstance(out.get(key), list):
            out[key] = [_portable(str(a)) for a in out[key]]
    if isinstance(out.get("parts"), list):
        out["parts"] = [_portable_meta(m) for m in out["parts"]]
    return out


def plan(args: argparse.Namespace, phase: str) -> list[Problem]:
    """The problems of a phase, in the order they run."""
    levels = [int(x) for x in args.levels.split(",") if x.strip()]
    by_level = {level: level_problems(args.kb, level) for level in levels}
    if phase == "timing":
        # the levels taken in turn, so a run cut short by the budget has some of each
        chosen = [by_level[level][: args.timing_limit] for level in levels]
        turns = itertools.zip_longest(*chosen)
        return [p for turn in turns for p in turn if p is not None]
    small = [p for level in levels if level in (1, 2) for p in by_level[level]]
    if phase == "diagnose":
        return sample(small, args.diagnose, args.seed, phase)
    if phase == "steps":
        return sample(by_level.get(3, []), args.steps, args.seed, phase)
    return sample(small, args.compile, args.seed, phase)


def sweep_main(args: argparse.Namespace) -> int:
    phases = [p for p in PHASES if p in (args.phase or PHASES)]
    sweep = Sweep(args.out, args.budget_s, run_meta(args, phases))
    if str(ROOT) not in sys.path:  # run as a file: bench/ is on the path, the package is not
        sys.path.insert(0, str(ROOT))
    from nsight_agent.service.session import open_session

    runs_root = args.runs_root or Path(tempfile.mkdtemp(prefix="kb-sweep-runs-"))
    sweep.runs_root = runs_root
    print(f"runs in {runs_root}; phases {', '.join(phases)}; budget {args.budget_s} s", flush=True)
    # One serving session, as the MCP server holds one: its executor runs every job, its
    # warm workers the timing jobs and the pre-flights (only ncu's process starts cold).
    session = open_session(runs_root)
    try:
        where = session.measuring()
        for phase in phases:
            problems = plan(args, phase)
            print(f"== {phase}: {len(problems)} problems", flush=True)
            if phase == "timing":
                timing_phase(sweep, where, problems, args)
            elif phase in ("diagnose", "steps"):
                diagnose_phase(sweep, where, problems, args, phase)
            else:
                compile_phase(sweep, where, problems, args)
    finally:
        session.close()
        sweep.write()
    print(json.dumps(summarize(sweep.rows()), indent=1), flush=True)
    return 0


def merge_main(args: argparse.Namespace) -> int:
    rows: list[dict[str, Any]] = []
    metas = []
    for path in args.merge:
        data = json.loads(Path(path).read_text())
        rows = merge_rows(rows, data["rows"])
        metas.append(data.get("meta") or {})
    meta = _portable_meta({**metas[-1], "merged": [str(p) for p in args.merge], "parts": metas})
    summary = write_outputs(args.out, meta, rows)
    print(json.dumps(summary, indent=1))
    if args.results:
        if str(ROOT) not in sys.path:  # run as a file: bench/ is on the path, the package is not
            sys.path.insert(0, str(ROOT))
        from bench.sweep_results import write_sweep

        merged = {"meta": meta, "summary": summary, "rows": rows}
        print(f"results: {write_sweep(merged, args.results)}")
    return 0


def _shard(text: str) -> tuple[int, int]:
    """ "K/N" with 0 <= K < N."""
    found = re.fullmatch(r"(\d+)/(\d+)", text.strip())
    if not found or not int(found.group(1)) < int(found.group(2)):
        raise argparse.ArgumentTypeError(f"--shard takes K/N with 0 <= K < N, not {text!r}")
    return int(found.group(1)), int(found.group(2))


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--kb", type=Path, default=ROOT / ".kb", help="KernelBench checkout")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/out")) / "kb")
    ap.add_argument("--phase", action="append", choices=PHASES, help="repeatable; default all")
    ap.add_argument("--levels", default="1,2,3")
    ap.add_argument("--timing-limit", type=int, help="first N problems of each level")
    ap.add_argument("--diagnose", type=int, default=20, help="level 1-2 problems sampled")
    ap.add_argument("--steps", type=int, default=10, help="level 3 models sampled")
    ap.add_argument("--compile", type=int, default=20, help="level 1-2 problems sampled")
    ap.add_argument("--skip", type=int, default=0, help="skip each phase's first N problems")
    ap.add_argument("--files", help="only these problem files (comma-separated names)")
    ap.add_argument(
        "--shard",
        type=_shard,
        default=(0, 1),
        help="K/N: only the problems whose place in the phase is K modulo N (one GPU each)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget-s", type=float, help="start no problem after this long")
    ap.add_argument("--problem-timeout-s", type=float, default=300.0)
    ap.add_argument("--runs", type=int, default=5, help="timing path: runs at least")
    ap.add_argument("--correctness", default="kernelbench", choices=("default", "kernelbench"))
    ap.add_argument("--peer-trials", type=int, default=100)
    ap.add_argument("--peer-warmup", type=int, default=3)
    ap.add_argument("--peer-timeout-s", type=float, default=300.0)
    ap.add_argument(
        "--honest-min-ms",
        type=float,
        default=0.1,
        help="KernelBench's timing counts as honest when both its times are at least this",
    )
    ap.add_argument("--deep", action="store_true", help="diagnose: every section the checks read")
    ap.add_argument("--runs-root", type=Path, help="default: a new folder under /tmp")
    ap.add_argument("--merge", nargs="+", type=Path, help="combine these JSON files, run nothing")
    ap.add_argument(
        "--results",
        type=Path,
        help="with --merge: also write the merged sweep as DIR/kernelbench-sweep/<date>-<gpu>-"
        "<commit>.json (e.g. bench/results)",
    )
    ap.add_argument(
        "--fingerprint",
        action="store_true",
        help="print this tree's source fingerprint, run nothing",
    )
    ap.add_argument("--peer-one", help=argparse.SUPPRESS)  # the peer's subprocess
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    args.argv = sys.argv[1:] if argv is None else list(argv)
    if args.fingerprint:
        print(source_fingerprint())
        return 0
    if args.peer_one:
        return peer_one(args)
    if args.merge:
        return merge_main(args)
    return sweep_main(args)


if __name__ == "__main__":
    sys.exit(main())
