"""One kernel's diagnosis: the bound with its numbers, then causes ranked, then what is missing.

``diagnose_action`` is a pure function of one ``ncu_report`` action (and the caller's hints).
Ranking:

1. every check runs (``checks.run_checks``); a broader cause is folded into a more specific one
   that also fired (excess DRAM bytes into uncoalesced access or spills);
2. causes with an estimated gain under ``min_gain_pct`` are dropped;
3. a kernel at a roof (DRAM or its precision's compute peak) keeps only causes that relieve that
   roof (less of the limited work), ranked by gain, then the roof itself; no other defect is
   invented for it. Otherwise causes rank by estimated gain, except that a cause whose fix
   rewrites the code another's evidence comes from ranks above it (``checks.OUTRANKS``: idle
   tensor cores above the operand feed's memory symptoms);
4. ncu's rule results are absorbed by the causes they stand for; symptom rules (utilisation,
   stalls, achieved occupancy, the bound) go to the top cause; the rest are listed, briefly,
   as ``unmapped``.

The answer for one kernel stays under 2 KB of JSON (``model_dump_json(exclude_none=True)``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, PrivateAttr

from nsight_agent.diagnose import checks as ck
from nsight_agent.diagnose import checks_compute as cc
from nsight_agent.diagnose import checks_launch as cl
from nsight_agent.diagnose import checks_memory as cm
from nsight_agent.diagnose import metrics as dm
from nsight_agent.diagnose.advice import advise
from nsight_agent.diagnose.bound import BoundResult, classify
from nsight_agent.diagnose.cause import Cause, Context, ev, make_cause
from nsight_agent.diagnose.findings import Finding, findings, ncu_advice, sentences
from nsight_agent.diagnose.owner import Owner, owner_of
from nsight_agent.diagnose.roofline import roofline
from nsight_agent.diagnose.source_lines import SourceHotspots, hot_lines
from nsight_agent.diagnose.thresholds import DiagnosisThresholds
from nsight_agent.diagnose.vocabulary import CauseId

COMPUTE_SECTION = "ComputeWorkloadAnalysis"
# section -> (metrics whose presence shows it was collected, what it tells a deeper pass)
SECTIONS: dict[str, tuple[tuple[str, ...], str]] = {
    dm.SOL_SECTION: ((dm.SM_THROUGHPUT,), "SM and memory throughput: the bound"),
    dm.LAUNCH_SECTION: ((cl.GRID,), "grid, block and waves: too few blocks, tail effect"),
    "Occupancy": ((cl.THEORETICAL_OCC,), "occupancy and the resource that limits it"),
    dm.ROOF_SECTION: (
        ("smsp__sass_thread_inst_executed_op_ffma_pred_on.sum.per_cycle_elapsed",),
        "fp32/fp64 FLOP: intensity and the compute roof",
    ),
    dm.HALF_SECTION: (
        ("smsp__sass_thread_inst_executed_op_hfma_pred_on.sum.per_cycle_elapsed",),
        "half-precision FLOP",
    ),
    dm.TENSOR_SECTION: (
        tuple(m for w in dm.WORK if w.tensor_core for m, _ in w.achieved),
        "tensor FLOP: intensity with tensor-core work",
    ),
    "MemoryWorkloadAnalysis_Tables": (
        (cm.GLD_SECTORS, cm.SHARED_CONFLICTS[0]),
        "sectors per request, bank conflicts",
    ),
    "WarpStateStats": ((cm.STALL_LONG_SB, cc.THREADS_PER_INST), "stall reasons, divergence"),
    "InstructionStats": ((cm.GLOBAL_INST,), "instruction mix: atomics, local, fp64"),
    "SourceCounters": ((cm.GLD_NEEDED,), "where in the source: hot lines, excess sectors"),
    COMPUTE_SECTION: (
        (cc.PIPE_ISSUE.format("alu"),),
        "each SM pipe's issue rate: which unit a compute-bound kernel waits on",
    ),
}
# What a deeper pass should add first, when absent.
DEEPER_ORDER = (
    dm.SOL_SECTION,
    dm.TENSOR_SECTION,
    "SourceCounters",
    "MemoryWorkloadAnalysis_Tables",
    "WarpStateStats",
    "InstructionStats",
    dm.ROOF_SECTION,
    "Occupancy",
    dm.LAUNCH_SECTION,
)
# Every section a diagnosis may ask a deeper pass for (``_sections``): what one run collects.
DEEPER = (*DEEPER_ORDER, COMPUTE_SECTION)


class KernelDiagnosis(BaseModel):
    """What bounds one kernel, why, and what to try, ranked."""

    kernel: str = Field(description="Kernel name (shortened to 80 characters)")
    owner: Owner | None = Field(default=None, description="Whose kernel")
    duration_ns: float | None = Field(default=None, description="gpu__time_duration.sum")
    bound: BoundResult = Field(description="The bound and the numbers that decided it")
    headline: str = Field(description="The one line to read first")
    causes: list[Cause] = Field(description="Causes, most gain first; a roof after its relievers")
    collected: list[str] = Field(
        description="ncu sections in the report, or whose counters the checks read are there"
    )
    deeper: dict[str, str] | None = Field(
        default=None, description="Sections a deeper pass would add, with what each would tell"
    )
    unmapped: list[str] | None = Field(
        default=None, description="ncu rules not absorbed by any cause: 'RuleId: title (gain%)'"
    )
    where: SourceHotspots | None = Field(
        default=None,
        description="Hottest source lines for the top cause (SourceCounters); SASS if no line",
    )
    # ncu rules standing only for causes our checks measured and declined: still listed in
    # ``unmapped`` (ncu said them), never offered as the pointer of a silent kernel.
    _declined_rules: frozenset[str] = PrivateAttr(default=frozenset())

    def declined_rules(self) -> frozenset[str]:
        return self._declined_rules


def _fold(causes: list[Cause]) -> list[Cause]:
    fired = {c.id: c for c in causes}
    out: list[Cause] = []
    for c in causes:
        into = next((fired[s] for s in ck.FOLDS.get(c.id, ()) if s in fired), None)
        if into is None:
            out.append(c)
        else:  # the folded cause's headline number becomes the second piece of evidence
            into.ev = [*into.ev[:1], c.ev[0], *into.ev[1:]][:5]
    return out


def _rank(causes: list[Cause], t: DiagnosisThresholds) -> list[Cause]:
    roof = next((c for c in causes if c.kind == "roof"), None)
    defects = [c for c in causes if ck.is_ranked_defect(c, t)]
    defects = ck.by_precedence(sorted(defects, key=lambda c: -(c.gain or 0.0)))
    if roof is None:
        return defects[: t.max_causes]
    relievers = [c for c in defects if c.id in ck.RELIEVES.get(roof.id, ())]
    return [*relievers[: t.max_causes - 1], roof]


# When no sentence of the rule reads as advice (ncu sometimes advises without an imperative:
# "it is recommended ..."), say so rather than offer its description as the thing to do.
NO_ADVICE = (
    "no advice picked out of ncu's rule text: read it whole, with its evidence "
    "(get_run(..., 'findings'))"
)


def unit_may_limit(f: Finding, ctx: Context) -> bool:
    """Whether the unit a *local* ncu estimate is about could be what holds this kernel back.

    A local estimate is one unit's throughput in isolation: it shortens the kernel only when
    that unit limits it. Never for a memory-bound kernel; for ncu's FPInstructions (FADD/FMUL
    pairs one FFMA could replace) only when that precision's FLOP rate is the kernel's own and
    at least half its peak. Without this, on the H200 an SFU-bound kernel (MUFU.SIN, its fp32
    rate far under half its peak) gets the headline "fp32 non-fused instructions"."""
    if ctx.bound.bound == "memory-bound":
        return False
    if f.rule_id == "FPInstructions":
        precision = next((p for p in ("fp64", "fp32", "fp16") if p in f.title.lower()), None)
        busy = ctx.bound.precision_pct or 0.0
        return precision == ctx.bound.precision and busy >= ctx.t.local_unit_busy_pct
    return True


def symptom_headroom(ctx: Context) -> float:
    """The most a symptom rule's fix can gain, in %: the busiest unit's idle share.

    Symptom rules (achieved occupancy, issue slots, stall reasons) are about hiding latency:
    the same work, issued better. That work cannot go faster than its busiest unit's peak, so a
    kernel whose SM or memory unit is at 90 % of peak gains at most 10 % from them, whatever
    their estimate (on the H200, a large achieved-occupancy estimate of ncu's would headline an
    SFU loop whose XU pipe issues near its peak)."""
    busiest = max(ctx.bound.compute_pct or 0.0, ctx.bound.memory_pct or 0.0)
    return max(0.0, 100.0 - busiest)


def _from_ncu(ctx: Context, declined: frozenset[CauseId]) -> list[Cause]:
    """Never silent: when none of our checks names a cause, ncu's rules that estimate a
    sizeable gain become causes, mapped into the vocabulary where they map, else passed
    through as ``ncu_rule``; the gain is ncu's, and a local estimate says so. A local
    estimate (one SM unit's throughput, or occupancy) is not passed through for a
    memory-bound kernel: a faster SM unit does not shorten a kernel that waits on memory.
    Nor is a rule for a cause our own check ``declined``, its inputs measured, nor a symptom
    rule where the busiest unit leaves less than ``ncu_passthrough_pct`` to gain."""
    out: list[Cause] = []
    # Rules that name a defect before symptom rules (utilisation, stalls), each by estimate.
    found = sorted(
        ctx.findings, key=lambda f: (ck.is_symptom(f.rule_id), -(f.estimated_speedup_pct or 0.0))
    )
    for f in found:
        est = f.estimated_speedup_pct
        if f.type not in ("optimization", "warning") or est is None:
            continue
        if est < ctx.t.ncu_passthrough_pct:
            continue
        if f.speedup_type == "local" and not unit_may_limit(f, ctx):
            continue
        if ck.is_symptom(f.rule_id) and symptom_headroom(ctx) < ctx.t.ncu_passthrough_pct:
            continue
        mapped = ck.causes_of(f) or ck.fallback_of(f)
        cause_id = mapped[0] if mapped else "ncu_rule"
        if cause_id in declined or any(c.id == cause_id for c in out):
            continue
        evidence = [ev(f"ncu {f.rule_id} estimate", est, "%", ">=", ctx.t.ncu_passthrough_pct)]
        evidence += [ev(m.name, m.value) for m in f.focus_metrics[:2] if m.value is not None]
        said = sentences(f.message)
        first = (said[0] if said else f.title)[:160]
        c = make_cause(cause_id, evidence, None, "", rule=f, note=f"ncu's rule: {first}")
        if cause_id == "ncu_rule":
            c.title = f"ncu: {f.title}"[:60]
            # ncu's own advice where the rule gives one; a descriptive sentence is no action.
            advice = ncu_advice(f.message)
            c.actions = [advice[:200]] if advice else [NO_ADVICE]
        if f.speedup_type == "local":  # not a run-time estimate: shown, not ranked on
            c.gain, c.gain_src, c.sev = None, None, "medium" if est >= 30 else "low"
            c.note = f"ncu's local estimate {est:.0f}% (one unit in isolation). {c.note}"[:200]
        out.append(c)
    return out[: ctx.t.max_causes]


def _absorb(causes: list[Cause], found: list[Finding]) -> list[str]:
    """Attach rule ids to the causes they stand for; return the short list of the rest."""
    unmapped: list[str] = []
    for f in found:
        if f.type not in ("optimization", "warning", "error"):
            continue
        target = next((c for c in causes if c.id in ck.causes_of(f)), None)
        if target is None:  # a rule passed through as a cause of its own is not "unmapped"
            target = next((c for c in causes if f.rule_id in (c.rules or [])), None)
        if target is None and ck.is_symptom(f.rule_id) and causes:
            target = causes[0]
        if target is not None:
            target.rules = list(dict.fromkeys([*(target.rules or []), f.rule_id]))
            continue
        gain = f" ({f.estimated_speedup_pct:.0f}%)" if f.estimated_speedup_pct is not None else ""
        unmapped.append(f"{f.rule_id}: {f.title[:32]}{gain}")
    return list(dict.fromkeys(unmapped))[:3]


def listed_sections(action: Any) -> set[str]:
    """The sections a report lists for this kernel (none for a stand-in without the list)."""
    try:
        return {str(s.identifier()) for s in action.sections()}
    except Exception:  # no list (a stand-in action), or a reader that cannot give it
        return set()


def _sections(
    r: dm.Reader, found: list[Finding], tensor_busy: bool, compute_bound: bool
) -> tuple[list[str], dict[str, str]]:
    # What the report says it holds, what ran rules, and what left the counters the checks
    # read (a report asked for them by name holds no section).
    held = {f.section for f in found} | listed_sections(r.action)
    collected = [
        s for s, (probes, _) in SECTIONS.items() if s in held or any(r.has(p) for p in probes)
    ]
    deeper: dict[str, str] = {}
    # A compute-bound kernel under no roof yet also needs the pipes: the FLOP counters miss an
    # SFU- or integer-bound kernel (pipe_at_roof). On top of the usual four, not instead of one.
    extra = compute_bound and COMPUTE_SECTION not in collected
    if extra:
        deeper[COMPUTE_SECTION] = SECTIONS[COMPUTE_SECTION][1]
    for s in DEEPER_ORDER:
        if s in collected or (s == dm.TENSOR_SECTION and not tensor_busy):
            continue
        deeper[s] = SECTIONS[s][1]
        if len(deeper) == 4 + extra:
            break
    return collected, deeper


def _headline(bound: BoundResult, causes: list[Cause]) -> str:
    roof = next((c for c in causes if c.kind == "roof"), None)
    top = causes[0] if causes else None
    if roof is not None and roof.note:
        extra = f"; {top.title.lower()} first" if top is not None and top is not roof else ""
        return roof.note + extra
    if top is None:
        return f"{bound.bound}: no cause found in the metrics collected"
    gain = f" (est. {top.gain:.0f}% faster)" if top.gain is not None else ""
    local = top.ev[0] if top.gain is None and top.ev else None
    if local is not None and local.m.startswith("ncu ") and local.m.endswith(" estimate"):
        gain = f" (ncu's local estimate {local.v:.0f}%, one unit in isolation)"
    return f"{bound.bound}: {top.title.lower()}{gain}"


MAX_JSON_BYTES = 2048


def _size(d: KernelDiagnosis) -> int:
    return len(d.model_dump_json(exclude_none=True))


def _fit(d: KernelDiagnosis, limit: int = MAX_JSON_BYTES) -> KernelDiagnosis:
    """Trim the least useful parts until the JSON fits: unmapped rules, deeper sections, notes
    of lower causes, then the lowest cause other than the roof (never the top one)."""
    while _size(d) > limit:
        if d.where is not None and len(d.where.lines) > 1:
            d.where.lines = d.where.lines[:-1]
        elif d.unmapped and len(d.unmapped) > 1:
            d.unmapped = d.unmapped[:-1]
        elif d.deeper and len(d.deeper) > 2:
            d.deeper = dict(list(d.deeper.items())[:-1])
        elif any(c.note for c in d.causes[1:]):
            for c in d.causes[1:]:
                c.note = None
        elif len(d.causes) > 1:
            # The lowest cause that is not the roof: the headline may name the roof.
            lower = range(len(d.causes) - 1, 0, -1)
            del d.causes[next((i for i in lower if d.causes[i].kind != "roof"), lower[0])]
        else:
            break
    return d


def diagnose_action(
    action: dm.ActionLike,
    *,
    ideal_bytes: float | None = None,
    input_dtypes: list[str] | None = None,
    thresholds: DiagnosisThresholds | None = None,
    user_kernels: set[str] | None = None,
    op: str | None = None,
) -> KernelDiagnosis:
    """Diagnose one kernel (one ``ncu_report`` action): bound, ranked causes, missing sections.

    ``ideal_bytes``: bytes the kernel must move (inputs read once, outputs written once), for
    the excess-traffic check. ``input_dtypes``: e.g. ``["bfloat16"]``, for the precision check.
    ``user_kernels``: kernel names the user's source defines; ``op``: the torch operator range
    the kernel ran in. Both decide the owner, and so which actions fit.
    """
    t = thresholds or DiagnosisThresholds()
    r = dm.Reader(action)
    found = findings(action)
    bound = classify(action, t)
    ctx = Context(
        r=r,
        bound=bound,
        rl=roofline(action),
        findings=found,
        t=t,
        ideal_bytes=ideal_bytes,
        input_dtypes=input_dtypes,
    )
    checked = ck.run_checks(ctx)
    causes = _rank(_fold(checked.fired), t) or _from_ncu(ctx, checked.declined)
    name = dm.kernel_name(action)
    owner = owner_of(name, user_kernels, op, dm.mangled_name(action))
    advise(causes, owner, name, bound.precision)
    for c in causes[1:]:  # the top cause carries everything; the rest stay short (2 KB)
        c.actions, c.ev = c.actions[:1], c.ev[:2]
    unmapped = _absorb(causes, found)
    collected, deeper = _sections(
        r,
        found,
        (bound.tensor_pct or 0.0) >= t.tensor_idle_below_pct,
        bound.bound == "compute-bound" and bound.roof is None,
    )
    diagnosis = KernelDiagnosis(
        kernel=name[:80],
        owner=owner,
        duration_ns=r.get(dm.DURATION, required=False),
        bound=bound,
        headline=_headline(bound, causes),
        causes=causes,
        collected=collected,
        deeper=deeper or None,
        unmapped=unmapped or None,
        where=hot_lines(action, causes[0].id) if causes else None,
    )
    diagnosis._declined_rules = frozenset(
        f.rule_id for f in found if set(ck.causes_of(f) or ("-",)) <= checked.declined
    )
    if diagnosis.where is not None or hot_lines(action, None, top=1) is not None:
        # Source-level data is there (the per-instruction counters prove it).
        diagnosis.collected = list(dict.fromkeys([*collected, "SourceCounters"]))
        if diagnosis.deeper:
            diagnosis.deeper.pop("SourceCounters", None)
            diagnosis.deeper = diagnosis.deeper or None
    return _fit(diagnosis)
