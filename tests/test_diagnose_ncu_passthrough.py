"""ncu's rules passed through as causes: only about a unit that may limit the kernel, acting
on ncu's advice rather than its description.

An ``ncu_rule`` cause's action is not the rule message's first sentence: ncu's
messages describe first ("The 4.00 theoretical warps per scheduler ... are below ...") and
advise later. ``ncu_advice`` picks the sentence that says what to do, or nothing.

The rule was written on the planted reports' messages (the tuning set, every one labelled
below). The step and engine reports' other messages were labelled apart and never used to
change it: their agreement is the score we report (printed; ``pytest -rP``)."""

from __future__ import annotations

import glob
import json
from pathlib import Path

import pytest

from nsight_agent.diagnose.findings import findings, ncu_advice, sentences
from nsight_agent.diagnose.kernel import NO_ADVICE, diagnose_action, unit_may_limit
from nsight_agent.engine.collection import extract
from tests.fakes import FakeAction
from tests.test_diagnose_causes import BASE, context, rule
from tests.test_step_view import IDS, report

FIXTURES = Path(__file__).parent / "fixtures"
# The planted reports the advice labels were written on: a planted set recorded later (the
# held-out matmul kernels of the diagnosis rules) is no tuning material for them.
_LATER = {
    e["id"]
    for e in json.loads((FIXTURES / "planted" / "catalog.json").read_text())
    if e.get("split") == "held_out_matmul"
}
TUNING_REPORTS = [
    *sorted(
        Path(p)
        for p in glob.glob(str(FIXTURES / "planted" / "*.ncu-rep"))
        if Path(p).stem not in _LATER
    ),
    FIXTURES / "h200_bf16_matmul_sections.ncu-rep",
]
ENGINE_REPORTS = sorted(
    Path(p) for p in glob.glob(str(FIXTURES / "engine" / "**" / "*.ncu-rep"), recursive=True)
)
Key = tuple[str, str]  # (ncu rule id, message title)

# Tuning set: rule title -> how the chosen sentence starts (None: the message only describes).
TUNED: dict[tuple[str, str], str | None] = {
    ("HighPipeUtilization", "Low Utilization"): "Check the Launch Statistics",
    ("IssueSlotUtilization", "Issue Slot Utilization"): "To increase the number of eligible warps",
    ("CPIStall", "Drain Stalls"): "Make sure the memory access patterns",
    ("AchievedOccupancy", "Achieved Occupancy"): "See the CUDA Best Practices Guide",
    ("SOLBottleneck", "Latency Issue"): "Look at Scheduler Statistics",
    ("CPIStall", "Long Scoreboard Stalls"): "Find the instruction producing",
    ("LaunchConfiguration", "Tail Effect"): "Try launching a grid with no partial wave",
    (
        "UncoalescedSharedAccess",
        "Uncoalesced Shared Accesses",
    ): "Check the L1 Wavefronts Shared Excessive",
    ("SharedMemoryConflicts", "Shared Load Bank Conflicts"): "Check the Source Counters section",
    ("SharedMemoryConflicts", "Shared Store Bank Conflicts"): "Check the Source Counters section",
    ("CPIStall", "Mio Throttle Stalls"): "When caused by shared memory accesses, trying",
    ("TheoreticalOccupancy", "Theoretical Occupancy"): None,
    (
        "MemoryCacheAccessPattern",
        "L1TEX Global Load Access Pattern",
    ): "Check the Source Counters section",
    (
        "MemoryCacheAccessPattern",
        "L2 Global Load Access Pattern",
    ): "Check the Source Counters section",
    (
        "MemoryCacheAccessPattern",
        "L2 Global Store Access Pattern",
    ): "Check the Source Counters section",
    (
        "MemoryCacheAccessPattern",
        "L2 Local Store Access Pattern",
    ): "Check the Source Counters section",
    (
        "MemoryCacheAccessPattern",
        "L1TEX Local Load Access Pattern",
    ): "Check the Source Counters section",
    (
        "MemoryCacheAccessPattern",
        "L1TEX Local Store Access Pattern",
    ): "Check the Source Counters section",
    (
        "SOLBottleneck",
        "High Compute Throughput",
    ): "Compute is more heavily utilized than Memory: Look",
    (
        "SOLBottleneck",
        "High Memory Throughput",
    ): "Memory is more heavily utilized than Compute: Look",
    (
        "LaunchConfiguration",
        "Small Grid",
    ): "If you do not intend to execute this kernel concurrently",
    ("WorkloadImbalance", "L2 Slices Workload Imbalance"): None,
    ("WorkloadImbalance", "SMSPs Workload Imbalance"): None,
    ("WorkloadImbalance", "SMs Workload Imbalance"): None,
    ("WorkloadImbalance", "L1 Slices Workload Imbalance"): None,
    ("FPInstructions", "FP32 Non-Fused Instructions"): None,
    ("FPInstructions", "FP64 Non-Fused Instructions"): None,
    ("ThreadDivergence", "Thread Divergence"): "Try to avoid different execution paths",
    ("HighPipeUtilization", "Very High Utilization"): "See the Profiling Guide",
    ("HighPipeUtilization", "High Utilization"): "Check the Warp State Statistics section",
    ("UncoalescedGlobalAccess", "Uncoalesced Global Accesses"): "Check the L2 Theoretical Sectors",
    ("CPIStall", "Membar Stalls"): "Avoid executing any unnecessary memory barriers",
    ("CPIStall", "Lg Throttle Stalls"): "Avoid redundant global memory accesses",
    ("SOLFPRoofline", "FP64/32 Utilization"): "If Compute Workload Analysis determines",
    ("CPIStall", "Not Selected Stalls"): "A high number of not selected warps",
    ("CPIStall", "Math Pipe Throttle Stalls"): "Try to increase the number of active warps",
    ("CPIStall", "No Instruction Stalls"): "See also the related Branch Resolving state",
    ("PCSamplingData", "No Samples"): None,
    ("SOLBottleneck", "Small Grid"): "Look at Launch Statistics",
}

# Held-out set, labelled by reading each message (the sentence a reader would act on), with
# the rule held fixed: message start -> expected sentence start (None: no advice in it).
HELD_OUT: dict[str, str | None] = {
    "The difference between calculated theoretical": "See the CUDA Best Practices Guide",
    "The memory access pattern for global loads from L2": "Check the Source Counters section",
    "This kernel has uncoalesced global accesses": "Check the L2 Theoretical Sectors",
    "On average, each warp of this workload spends 49.1 cycles being stalled waiting for the "
    "MIO": "When caused by shared memory accesses, trying",
    "On average, each warp of this workload spends 177.5 cycles": "Find the instruction",
    # "By converting pairs ... could be increased by up to 23%": advice in a conditional.
    "This kernel executes 3670016 fused": "By converting pairs of non-fused instructions",
    "On average, each warp of this workload spends 6.0 cycles": "Whenever possible, try to",
    # "it is recommended to have at least two blocks per multiprocessor": advice.
    "If you execute __syncthreads()": "If you execute __syncthreads()",
    "The 12.00 theoretical warps per scheduler": None,
    # From the held-out step layer_ho, a tail effect worded unlike the tuning
    # set's; labelled after its advice was seen (the message has one imperative).
    "A wave of thread blocks is defined as the maximum number": "Try launching a grid with no",
}


def _rule_messages(paths: list[Path], leave_out: frozenset[str] = frozenset()) -> dict[Key, str]:
    """The first message of each (rule, title) among the optimizations and warnings, past
    the messages in ``leave_out``."""
    out: dict[Key, str] = {}
    for path in paths:
        for action in extract.iter_actions(extract.load(path)):
            for f in findings(action):
                if f.type in ("optimization", "warning") and f.message not in leave_out:
                    out.setdefault((f.rule_id, f.title), f.message)
    return out


def _all_messages(paths: list[Path]) -> list[str]:
    return [
        f.message for p in paths for a in extract.iter_actions(extract.load(p)) for f in findings(a)
    ]


def _starts(advice: str | None, expected: str | None) -> bool:
    return advice is None if expected is None else bool(advice and advice.startswith(expected))


def test_the_advice_is_one_of_the_messages_own_sentences() -> None:
    messages = _rule_messages(TUNING_REPORTS)
    assert len(messages) >= 30
    for (rule_id, title), message in messages.items():
        advice = ncu_advice(message)
        assert advice is None or advice in sentences(message), (rule_id, advice)
        key = (rule_id, title)
        assert key in TUNED, f"unlabelled tuning message {key}: {message}"
        assert _starts(advice, TUNED[key]), (key, advice)


def test_held_out_agreement() -> None:
    tuned = frozenset(_all_messages(TUNING_REPORTS))
    held = _rule_messages([*(report(i) for i in IDS), *ENGINE_REPORTS], leave_out=tuned)
    hits = 0
    for key, message in held.items():
        label = next((k for k in HELD_OUT if message.startswith(k)), None)
        assert label is not None, f"unlabelled held-out message {key}: {message}"
        hits += _starts(ncu_advice(message), HELD_OUT[label])
    labelled = len(held)
    print(f"\nncu advice, held-out agreement: {hits}/{labelled}")
    assert labelled == len(HELD_OUT)
    # Measured when the labels were written: 7 of 9 (the two misses advise without an
    # imperative); 8 of 10 with layer_ho's message. A change that loses a hit fails here.
    assert hits >= 8


@pytest.mark.parametrize(
    ("message", "action"),
    [
        (
            "The 4.00 theoretical warps per scheduler are below the maximum of 16. This "
            "kernel's theoretical occupancy (25.0%) is limited by the number of registers.",
            NO_ADVICE,
        ),
        (
            "A wave of thread blocks is the maximum number of blocks run at once. This launch "
            "results in 3 full waves and a partial wave. Try launching a grid with no partial "
            "wave. See the Hardware Model description.",
            "Try launching a grid with no partial wave.",
        ),
    ],
)
def test_a_passed_through_rule_acts_on_its_advice_or_says_there_is_none(
    message: str, action: str
) -> None:
    quiet = {**BASE, "sm__throughput.avg.pct_of_peak_sustained_elapsed": 65.0}
    d = diagnose_action(
        FakeAction(quiet, [rule("NewRule2027", "Something New", 35.0, message=message)])
    )
    cause = d.causes[0]
    assert cause.id == "ncu_rule"
    assert cause.actions == [action]
    # The description stays ncu's, in the note, never as the thing to do.
    assert cause.note is not None and sentences(message)[0] in cause.note


# --- which local estimates may become a cause ------------------------------------------------

FP32_NON_FUSED = "FP32 Non-Fused Instructions"


@pytest.mark.parametrize(
    ("bound", "precision", "busy", "passed"),
    [
        ("compute-bound", "fp32", 5.7, False),  # the H200's SFU-bound probe: fp32 idle
        ("compute-bound", "fp32", 80.0, True),  # the FMA pipe is what it waits on
        ("compute-bound", "fp64", 80.0, False),  # another precision's unit is busy
        ("memory-bound", "fp32", 80.0, False),
    ],
)
def test_a_local_fp_estimate_needs_its_unit_busy(
    bound: str, precision: str, busy: float, passed: bool
) -> None:
    quiet = {**BASE, "sm__throughput.avg.pct_of_peak_sustained_elapsed": 65.0}
    ctx = context(FakeAction(quiet, [rule("FPInstructions", FP32_NON_FUSED, 50.0, kind=1)]))
    ctx.bound = ctx.bound.model_copy(
        update={"bound": bound, "precision": precision, "precision_pct": busy}
    )
    (finding,) = ctx.findings
    assert unit_may_limit(finding, ctx) is passed


def test_an_idle_units_local_estimate_is_listed_not_made_the_cause() -> None:
    quiet = {**BASE, "sm__throughput.avg.pct_of_peak_sustained_elapsed": 65.0}
    d = diagnose_action(FakeAction(quiet, [rule("FPInstructions", FP32_NON_FUSED, 50.0, kind=1)]))
    assert not d.causes and "no cause found" in d.headline
    assert d.unmapped and d.unmapped[0].startswith("FPInstructions")
    # A local estimate about another unit is still passed through, its headline saying so,
    # and it is not listed a second time among the unmapped rules.
    d = diagnose_action(FakeAction(quiet, [rule("NewRule2027", "Something New", 57.0, kind=1)]))
    assert d.causes[0].id == "ncu_rule"
    assert d.headline.endswith("(ncu's local estimate 57%, one unit in isolation)"), d.headline
    assert not any(u.startswith("NewRule2027") for u in d.unmapped or [])


@pytest.mark.parametrize(("sm", "passed"), [(30.0, True), (79.0, True), (81.0, False)])
def test_a_symptom_rule_gains_at_most_the_busiest_units_idle_share(sm: float, passed: bool) -> None:
    """Achieved occupancy (a symptom: the same work issued better) cannot take a kernel past
    its busiest unit's peak: at 81 % SM throughput under 20 % is left, below the pass-through
    threshold (20 %), so ncu's 71 % estimate is listed, not made the cause."""
    kernel = {**BASE, "sm__throughput.avg.pct_of_peak_sustained_elapsed": sm}
    occupancy = rule("AchievedOccupancy", "Achieved Occupancy", 71.0, kind=1)
    d = diagnose_action(FakeAction(kernel, [occupancy]))
    assert bool(d.causes) is passed, d.headline
    if not passed:
        assert d.unmapped and d.unmapped[0].startswith("AchievedOccupancy")
