"""A step that is never silent, on the real H200 step reports of
tests/fixtures/steps: no kernel of >= 5 % of a step says "no cause found"; one that has no
cause of its own points to the step cause covering it (the chain's ATen kernels to the
unfused chain) or to ncu's strongest rule; a report read without source owns a kernel of no
known library as the user's; the text answers start with the step summary."""

from __future__ import annotations

from pathlib import Path

import pytest

from nsight_agent.cli import main
from nsight_agent.diagnose.owner import Owner, owner_of
from nsight_agent.diagnose.step_view import pointed
from nsight_agent.service.diagnose import diagnose_file
from nsight_agent.views.text import render_diagnosis
from tests.test_step_view import IDS, report

SILENT = "no cause found"


@pytest.mark.parametrize("step_id", IDS)
def test_no_kernel_of_five_percent_is_silent(step_id: str) -> None:
    """As the product answers (3 in full, 12 in one line), a report read alone."""
    d = diagnose_file(report(step_id))
    entries = [(k.share_pct, k.diagnosis.headline) for k in d.kernels]
    entries += [(o.share_pct, o.headline) for o in d.others or []]
    sizeable = [(share, h) for share, h in entries if (share or 0.0) >= 5.0]
    assert sizeable
    assert not [h for _, h in sizeable if SILENT in h], sizeable


def test_the_chain_s_kernels_point_to_the_unfused_chain() -> None:
    """On the fusion step held out first (8 ATen kernels of a hand-written softmax and
    dropout): each kernel of >= 5 % either has a cause of its own (with its estimate) or
    points to the chain, in full and in one line; the two largest, compute-bound by the SOL
    rule with no cause of their own, point to it."""
    d = diagnose_file(report("chain_ho2"), limit=2)
    assert d.step is not None and "unfused_chain" in {c.id for c in d.step.causes or []}
    headlines = [k.diagnosis.headline for k in d.kernels if (k.share_pct or 0) >= 5.0]
    headlines += [o.headline for o in d.others or [] if (o.share_pct or 0) >= 5.0]
    assert len(headlines) == 8, headlines
    chain = [h for h in headlines if "part of the step's unfused_chain" in h]
    assert len(chain) >= 2 and all("torch.compile" in h for h in chain), headlines
    assert all(h in chain or "faster)" in h for h in headlines), headlines
    assert all("part of the step's unfused_chain" in k.diagnosis.headline for k in d.kernels)


def test_a_kernel_outside_any_step_cause_takes_ncus_strongest_rule() -> None:
    """The user's transposed gather of the chain step: no cause in the first pass, not in
    the chain (not a framework kernel): ncu's rule with the largest estimate."""
    d = diagnose_file(report("chain"))
    gather = next(k for k in d.kernels if "col_gather" in k.diagnosis.kernel)
    assert "ncu's strongest rule: AchievedOccupancy" in gather.diagnosis.headline


def test_a_report_alone_owns_an_unknown_kernel_as_the_users() -> None:
    assert owner_of("user_col_gather") == Owner(kind="user", who="yours")
    assert owner_of("user_col_gather", {"other_kernel"}).kind == "unknown"  # source says not
    assert owner_of("ampere_sgemm_128x64_nn").kind == "library"
    d = diagnose_file(report("chain"))
    assert d.step is not None
    gather = next(g for g in d.step.groups if "col_gather" in g.group)
    assert gather.owner == "yours"
    first = d.kernels[0].diagnosis
    assert "col_gather" in first.kernel and first.owner == Owner(kind="user", who="yours")


def test_the_text_answers_start_with_the_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = render_diagnosis(diagnose_file(report("chain")))
    lines = text.splitlines()
    assert lines[1].startswith("step: ") and "launches" in lines[1], lines[:3]
    assert "step cause unfused_chain" in text and text.index("step:") < text.index("\n\n")
    # The CLI's diagnose and report of the same report (not a terminal: the plain text).
    assert main(["diagnose", str(report("chain"))]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("step: "), out[:3]
    assert main(["report", str(report("chain"))]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("step: ") and any("unfused_chain" in line for line in out[:14])


def test_a_single_group_has_no_step_summary() -> None:
    d = diagnose_file(report("chain"), limit=1)
    d.step = d.step.model_copy(update={"groups": d.step.groups[:1]}) if d.step else None
    assert not render_diagnosis(d).splitlines()[1].startswith("step: ")


PLANTED = Path(__file__).parent / "fixtures" / "planted"


def test_a_rule_our_checks_measured_and_declined_is_never_the_pointer() -> None:
    """The logistic-map kernel (planted, H200): ncu's "Tail Effect (25%)" stays in
    ``unmapped`` although our tail check read the waves and declined it. Were this kernel a
    silent one of a step, that rule is not offered as its strongest; with nothing else to
    say, the answer names the rule as checked and declined (the chain step's view has no
    cause covering it)."""
    (k,) = diagnose_file(PLANTED / "logistic_map_cuda.ncu-rep").kernels
    d = k.diagnosis.model_copy()
    assert d.unmapped == ["LaunchConfiguration: Tail Effect (25%)"]
    assert d.declined_rules() >= {"LaunchConfiguration"}
    step = diagnose_file(report("chain")).step
    assert step is not None
    d.headline, d.deeper = "compute-bound: " + SILENT + " in the metrics collected", None
    said = pointed(d, d.kernel, None, step)
    assert (
        said
        == "compute-bound: no cause of its own; ncu's LaunchConfiguration checked here and declined"
    )
    d.unmapped = [*d.unmapped, "IssueSlotUtilization: Issue Slot Utilization (12%)"]
    said = pointed(d, d.kernel, None, step)
    assert said.endswith("ncu's strongest rule: IssueSlotUtilization: Issue Slot Utilization (12%)")
