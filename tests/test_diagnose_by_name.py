"""The counters asked for by name (diagnose/by_name.py) stand for the sections they replace.

Held against the planted H200 reports (tests/fixtures/planted, recorded with ncu's sections):
- the list is exactly what the checks read that those reports hold: nothing read is left out,
  and no counter is asked for that the sections never gave (a check would take a branch it
  was never tested on);
- a report holding only those counters, the cheap sections' and SourceCounters' values and the
  rules of the sections kept (what the one pass collects when the rest go by name) gives every
  planted kernel the same top cause, headline, bound, sections counted as collected (but
  InstructionStats, of which the checks read no counter: a deeper pass names it) and hot
  lines as the whole report.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import ncu_report
import pytest

from nsight_agent.catalog.metrics import bundled_catalog, is_valid_metric
from nsight_agent.diagnose import by_name
from nsight_agent.diagnose import metrics as dm
from nsight_agent.diagnose.checks_memory import TABLE_METRICS
from nsight_agent.diagnose.kernel import KernelDiagnosis, diagnose_action
from nsight_agent.service.diagnose import FIRST_PASS_METRICS, TABLES
from tests.fakes import FakeMetric
from tests.test_engine_targets import stand_in  # noqa: F401 - a fixture

PLANTED = Path(__file__).parent / "fixtures" / "planted"
# Per-launch attributes that LaunchStats and Occupancy (kept as sections) always carry.
LAUNCH_PREFIXES = ("launch__", "device__")


def _catalog() -> list[dict[str, Any]]:
    data = json.loads((PLANTED / "catalog.json").read_text())
    if isinstance(data, dict):
        data = next(v for v in data.values() if isinstance(v, list))
    return [e for e in data if (PLANTED / f"{e['id']}.ncu-rep").exists()]


ENTRIES = _catalog()
pytestmark = pytest.mark.skipif(not ENTRIES, reason="planted fixtures not recorded")


@functools.cache
def _loaded(kernel_id: str) -> tuple[Any, Any]:
    report = ncu_report.load_report(str(PLANTED / f"{kernel_id}.ncu-rep"))
    return report, report.range_by_idx(0).action_by_idx(0)


def _sections(action: Any) -> set[str]:
    return {str(s.identifier()) for s in action.sections()}


class CountersOnly:
    """What the one pass holds when ``dropped`` go by name: the counters asked for, every
    value of the sections kept (what the checks read of them is in ``held``), and only the
    kept sections' rules."""

    def __init__(self, action: Any, held: Iterable[str], dropped: Iterable[str]) -> None:
        self.action = action
        keep = set(held) | set(FIRST_PASS_METRICS)
        self.names = [
            n for n in action.metric_names() if n in keep or str(n).startswith(LAUNCH_PREFIXES)
        ]
        self.dropped = set(dropped)

    def name(self) -> str:
        return str(self.action.name())

    def metric_names(self) -> list[str]:
        return self.names

    def __getitem__(self, name: str) -> Any:
        assert name in self.names, name  # the Reader asks only for names it was shown
        return self.action[name]

    def rule_results_as_dicts(self) -> list[dict[str, Any]]:
        return [
            r
            for r in self.action.rule_results_as_dicts()
            if str(r.get("section_identifier", "")) not in self.dropped
        ]

    def sections(self) -> list[Any]:  # the report lists the kept sections only
        return [s for s in self.action.sections() if str(s.identifier()) not in self.dropped]

    def __getattr__(self, attr: str) -> Any:  # per-instruction values: SourceCounters is kept
        return getattr(self.action, attr)


def _diagnose(entry: dict[str, Any], action: Any) -> KernelDiagnosis:
    ideal = entry.get("ideal_bytes")
    return diagnose_action(action, ideal_bytes=float(ideal) if ideal else None)


def test_the_counters_are_what_the_checks_read_from_a_sections_report(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every name the Reader is asked about (a value, or only whether it is there: a section's
    probe, a peak's alternative) on every planted report, against what the reports hold."""
    asked: set[str] = set()
    for method in ("has", "get", "text"):
        plain = getattr(dm.Reader, method)

        def noting(self: dm.Reader, name: str, *rest: Any, _plain: Any = plain, **kw: Any) -> Any:
            asked.add(name)
            return _plain(self, name, *rest, **kw)

        monkeypatch.setattr(dm.Reader, method, noting)
    held: set[str] = set()
    for entry in ENTRIES:
        _, action = _loaded(str(entry["id"]))
        _diagnose(entry, action)
        if set(by_name.BY_NAME_SECTIONS) - {dm.TENSOR_SECTION} <= _sections(action):
            held |= set(action.metric_names())
    # Two reports were recorded with every roofline chart; the one pass collects no half chart.
    held -= {m for m, s in dm.SECTION_OF.items() if s in by_name.NOT_IN_ONE_PASS}
    read_and_held = {n for n in asked & held if not n.startswith(LAUNCH_PREFIXES)}
    assert len(read_and_held) > 60, sorted(read_and_held)  # the reports carry the sections
    assert sorted(set(by_name.COUNTERS) - read_and_held) == []  # nothing the sections lacked
    assert sorted(read_and_held - set(by_name.COUNTERS)) == []  # nothing read left out
    assert set(TABLE_METRICS) <= set(by_name.COUNTERS)
    assert len(by_name.COUNTERS) == len(set(by_name.COUNTERS))


def test_no_counter_is_of_a_section_the_one_pass_does_not_collect() -> None:
    """The half-precision roofline is no section of the one pass: with its counters by name,
    two planted matmuls lose their first cause on the H200.
    The one pass and the sections must read alike."""
    from nsight_agent.service.diagnose import ONE_PASS_SECTIONS

    assert set(by_name.NOT_IN_ONE_PASS).isdisjoint(ONE_PASS_SECTIONS)
    outside = {m for m, s in dm.SECTION_OF.items() if s not in ONE_PASS_SECTIONS}
    assert outside  # the half chart's counters are known by name
    assert sorted(set(by_name.COUNTERS) & outside) == []


def test_fp16_conversions_counted_as_half_adds_would_change_the_first_cause() -> None:
    """Why the half chart stays out: the planted fp16-in matmuls, given half adds as many as
    their FMAs (fp16 operands converted to fp32), lose the idle tensor cores to the very causes
    the H200's by-name pass named (registers, bank conflicts)."""
    hadd = "smsp__sass_thread_inst_executed_op_hadd_pred_on.sum.per_cycle_elapsed"
    ffma = "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum.per_cycle_elapsed"
    assert dm.SECTION_OF[hadd] == dm.HALF_SECTION
    for kernel_id in ("tensor_idle_triton", "fp16_nodot_triton"):
        (entry,) = [e for e in ENTRIES if e["id"] == kernel_id]
        _, action = _loaded(kernel_id)
        lean = CountersOnly(action, by_name.COUNTERS, by_name.BY_NAME_SECTIONS)
        assert _diagnose(entry, lean).causes[0].id == "tensor_cores_idle", kernel_id
        with_half = WithCounter(lean, hadd, action[ffma].as_double())
        assert _diagnose(entry, with_half).causes[0].id != "tensor_cores_idle", kernel_id


class WithCounter:
    """``report`` with one more counter, as ncu would have given it by name."""

    def __init__(self, report: CountersOnly, name: str, value: float) -> None:
        self.report, self.name_, self.value = report, name, FakeMetric(value)

    def metric_names(self) -> list[str]:
        return [*self.report.metric_names(), self.name_]

    def __getitem__(self, name: str) -> Any:
        return self.value if name == self.name_ else self.report[name]

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.report, attr)


def test_every_counter_is_a_metric_of_the_h200s_ncu() -> None:
    catalog = bundled_catalog()
    assert [m for m in by_name.COUNTERS if not is_valid_metric(m, catalog)] == []


# A section the checks read no counter of: without it only its rules are missing, so the
# answer counts it as not collected and a deeper pass names it.
RULES_ONLY = "InstructionStats"


def _same(
    whole: KernelDiagnosis, lean: KernelDiagnosis, kernel_id: str, dropped: tuple[str, ...]
) -> None:
    assert [c.id for c in lean.causes[:1]] == [c.id for c in whole.causes[:1]], kernel_id
    assert lean.headline == whole.headline, kernel_id
    assert lean.bound.bound == whole.bound.bound, kernel_id
    gone = {RULES_ONLY} & set(dropped) & set(whole.collected)
    assert lean.collected == [s for s in whole.collected if s not in gone], kernel_id
    assert gone <= set(lean.deeper or {}), kernel_id
    assert (lean.where and lean.where.lines) == (whole.where and whole.where.lines), kernel_id


@pytest.mark.parametrize(
    "dropped",
    [(TABLES,), by_name.BY_NAME_SECTIONS],
    ids=["the memory tables", "every section that goes by name"],
)
def test_a_report_of_the_counters_reads_as_the_sections_report(dropped: tuple[str, ...]) -> None:
    with_rules = 0
    for entry in ENTRIES:
        kernel_id = str(entry["id"])
        _, action = _loaded(kernel_id)
        lean = CountersOnly(action, by_name.COUNTERS, dropped)
        with_rules += len(lean.rule_results_as_dicts()) < len(action.rule_results_as_dicts())
        _same(_diagnose(entry, action), _diagnose(entry, lean), kernel_id, dropped)
    assert with_rules >= 10  # rules were there to lose


def test_the_ncu_command_carries_the_counters_and_not_the_sections_they_replace(
    stand_in: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Through the real pipeline and the stand-in ncu (the harness on the CPU): the one pass
    of ``counters`` reaches ncu as the kept sections and one --metrics list holding every
    counter; the rows are read as without them."""
    from nsight_agent.engine import pipeline
    from nsight_agent.service.diagnose import one_pass
    from tests.test_engine_targets import KERNELS, calls, sweep_request

    sections, counters = one_pass("counters")
    request = sweep_request(sections=sections, report_counters=counters)
    run = pipeline.profile(request, runs_root=tmp_path / "runs")
    (argv,) = [a for a in calls(stand_in, "cold") if "--version" not in a]
    asked = [argv[i + 1] for i, a in enumerate(argv) if a == "--section"]
    assert asked == sections and not set(asked) & set(by_name.BY_NAME_SECTIONS)
    (metrics,) = [argv[i + 1].split(",") for i, a in enumerate(argv) if a == "--metrics"]
    assert set(counters) <= set(metrics) and len(counters) > 60
    assert run.kernels == KERNELS
