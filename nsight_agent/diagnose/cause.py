"""What a cause check returns (``Cause`` with its ``Evidence``) and what it reads (``Context``).

A check is a pure function ``Context -> Cause | None``. The context holds one action's metric
reader, its bound, its roofline, ncu's rule results and the caller's hints; nothing here runs
ncu or touches a file.

The estimated gain of a cause is ncu's own estimate when one of ncu's rules matches the cause
and ncu rates it "global" (less run time of the whole kernel). ncu's "local" estimates (better
use of one unit in isolation) are not comparable with global ones: they are capped by our own
estimate. Where no rule matches, the check's own estimate is used and ``gain_src`` says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, Field

from nsight_agent.diagnose.bound import BoundResult
from nsight_agent.diagnose.findings import Finding
from nsight_agent.diagnose.metrics import Reader
from nsight_agent.diagnose.roofline import Roofline
from nsight_agent.diagnose.thresholds import DiagnosisThresholds
from nsight_agent.diagnose.vocabulary import VOCABULARY, CauseId, CauseKind, Skill

Cmp = Literal[">=", "<=", ">", "<", "="]


def sig(x: float, digits: int = 3) -> float:
    """``x`` rounded to a few significant digits (keeps the JSON short)."""
    if x == 0 or x != x:
        return x
    return float(f"{x:.{digits}g}")


class Evidence(BaseModel):
    """One metric behind a cause, with the threshold that triggered it."""

    m: str = Field(description="Metric name as ncu spells it, or a derived quantity")
    v: float = Field(description="Its value")
    u: str | None = Field(default=None, description="Unit, when known")
    cmp: Cmp | None = Field(default=None, description="Comparison that triggered the cause")
    thr: float | None = Field(default=None, description="The threshold compared against")


class Cause(BaseModel):
    """One cause from the vocabulary, with evidence, estimated gain and what to try."""

    id: CauseId = Field(description="Cause id from the vocabulary (docs/DIAGNOSIS.md)")
    kind: CauseKind | None = Field(
        default=None, description="'roof' when at a hardware limit; absent for a defect to fix"
    )
    title: str = Field(description="The cause's name for people")
    sev: Literal["high", "medium", "low"] = Field(
        description="high: gain >= 30 % (or at a roof); medium: >= 10 %; low: less"
    )
    gain: float | None = Field(
        default=None, description="Estimated run-time reduction if fixed, in %"
    )
    gain_src: str | None = Field(
        default=None,
        description="'ncu:<rule>' (ncu's global estimate), 'ncu-local-capped:<rule>' or "
        "'own:<formula>' (formulas in docs/DIAGNOSIS.md)",
    )
    ev: list[Evidence] = Field(description="2-5 metrics with the thresholds that triggered it")
    actions: list[str] = Field(description="What to try, most effective first")
    skill: Skill = Field(description="skills/<skill>/SKILL.md explains the cause")
    rules: list[str] | None = Field(
        default=None, description="ncu rule ids this cause absorbed (its own and symptoms)"
    )
    note: str | None = Field(default=None, description="One line of context, when needed")


@dataclass
class Context:
    """Everything a check may read about one kernel."""

    r: Reader
    bound: BoundResult
    rl: Roofline
    findings: list[Finding]
    t: DiagnosisThresholds
    ideal_bytes: float | None = None
    input_dtypes: list[str] | None = None
    # Metrics asked for and found absent; ``checks.run_checks`` empties it before each check,
    # so a check that declined with it still empty had every input it reads.
    missing: set[str] = field(default_factory=set)

    def num(self, name: str) -> float | None:
        value = self.r.get(name, required=False)
        if value is None:
            self.missing.add(name)
        return value

    def total(self, *names: str) -> float | None:
        """Sum of the metrics present; None when none is."""
        values = [v for v in (self.num(n) for n in names) if v is not None]
        return sum(values) if values else None

    def rule(self, rule_ids: tuple[str, ...], title: str | None = None) -> Finding | None:
        """ncu's matching rule result with a speedup estimate (largest first), if any."""
        for f in self.findings:
            if f.rule_id not in rule_ids or f.estimated_speedup_pct is None:
                continue
            if title is not None and title.lower() not in f.title.lower():
                continue
            return f
        return None


def ev(
    m: str, v: float, u: str | None = None, cmp: Cmp | None = None, thr: float | None = None
) -> Evidence:
    return Evidence(m=m, v=sig(v), u=u, cmp=cmp, thr=None if thr is None else sig(thr))


def make_cause(
    cause_id: CauseId,
    evidence: list[Evidence],
    own_gain: float | None,
    own_formula: str,
    rule: Finding | None = None,
    note: str | None = None,
) -> Cause:
    """A ``Cause`` of the vocabulary, its gain chosen as the module docstring says."""
    entry = VOCABULARY[cause_id]
    gain, src = own_gain, f"own:{own_formula}"
    if rule is not None and rule.estimated_speedup_pct is not None:
        if rule.speedup_type == "local" and own_gain is not None:
            gain = min(rule.estimated_speedup_pct, own_gain)
            src = f"ncu-local-capped:{rule.rule_id}"
        else:
            gain, src = rule.estimated_speedup_pct, f"ncu:{rule.rule_id}"
    if gain is not None:
        gain = round(max(0.0, min(gain, 99.0)), 1)
    if entry.kind == "roof":
        sev: Literal["high", "medium", "low"] = "high"
    else:
        g = gain or 0.0
        sev = "high" if g >= 30 else "medium" if g >= 10 else "low"
    return Cause(
        id=cause_id,
        kind="roof" if entry.kind == "roof" else None,
        title=entry.title,
        sev=sev,
        gain=gain,
        gain_src=src if gain is not None else None,
        ev=evidence[:5],
        actions=list(entry.actions),
        skill=entry.skill,
        rules=[rule.rule_id] if rule is not None else None,
        note=note,
    )
