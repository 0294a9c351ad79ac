"""Skill bundles: every metric exists on gh100, every section exists, every SKILL.md is complete."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nsight_agent.catalog import metrics as mc
from nsight_agent.catalog import skills as sk
from nsight_agent.diagnose import metrics as dm
from nsight_agent.errors import InvalidRequestError, NsightAgentError

EXPECTED = ["compute", "launch_config", "memory", "occupancy", "roofline", "tensor_cores", "timing"]
HEADINGS = ["## When to use it", "## What to collect", "## How to read it", "## What to try next"]


@pytest.fixture(scope="module")
def gh100() -> mc.MetricCatalog:
    return mc.bundled_catalog()


def test_all_bundles_load() -> None:
    assert [s.name for s in sk.list_skills()] == EXPECTED


@pytest.mark.parametrize("name", EXPECTED)
def test_bundle_metrics_and_sections_exist_on_gh100(name: str, gh100: mc.MetricCatalog) -> None:
    skill = sk.get_skill(name)
    assert skill.metrics, "a bundle without metrics"
    assert len(set(skill.metrics)) == len(skill.metrics), "a metric is listed twice"
    mc.validate_metrics(skill.metrics, gh100)
    assert set(skill.sections) <= set(mc.known_sections())
    mc.validate_sections(skill.sections)
    assert skill.replay_mode == "kernel"
    assert skill.notes


@pytest.mark.parametrize("name", EXPECTED)
def test_skill_md_has_front_matter_and_the_four_parts(name: str) -> None:
    skill = sk.get_skill(name)
    assert skill.skill_md.startswith(f"---\nname: {name}\ndescription: ")
    assert skill.description
    for heading in HEADINGS:
        assert heading in skill.skill_md, f"{name}/SKILL.md lacks {heading!r}"
    # The reading guide is a table with a threshold column.
    assert "| metric |" in skill.skill_md or "| field |" in skill.skill_md
    assert "suggests a problem when" in skill.skill_md


def _mentioned(metric: str, text: str) -> bool:
    """Written out, as the load form of an "(and `_st`)" pair, or as a stall-reason family."""
    if metric in text or metric.replace("_op_st", "_op_ld") in text:
        return True
    family = re.sub(r"(issue_stalled_)\w+?(_per_issue_active)", r"\1<reason>\2", metric)
    return family != metric and family in text


@pytest.mark.parametrize("name", [n for n in EXPECTED if n != "roofline"])
def test_each_bundle_metric_is_explained_in_its_skill(name: str) -> None:
    skill = sk.get_skill(name)
    missing = [m for m in skill.metrics if not _mentioned(m, skill.skill_md)]
    assert not missing, f"{name}/SKILL.md does not explain {missing}"


def test_roofline_bundle_is_what_diagnose_reads() -> None:
    skill = sk.get_skill("roofline")
    assert skill.metrics == dm.bound_metrics()
    assert set(skill.sections) <= set(dm.bound_sections())


def test_get_skill_refuses_unknown_and_path_like_names() -> None:
    with pytest.raises(InvalidRequestError) as info:
        sk.get_skill("nope")
    assert "roofline" in info.value.hint
    for bad in ("../skills", "memory/../timing", ".hidden"):
        with pytest.raises(InvalidRequestError):
            sk.get_skill(bad)


def _fake_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    catalog = tmp_path / "nsight_agent" / "catalog"
    catalog.mkdir(parents=True)
    monkeypatch.setattr(sk, "__file__", str(catalog / "skills.py"))
    return tmp_path / "skills"


def test_missing_skills_folder_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_checkout(tmp_path, monkeypatch)
    with pytest.raises(NsightAgentError, match="No skills folder was found") as info:
        sk.list_skills()
    assert "Reinstall" in info.value.hint and str(tmp_path / "skills") in info.value.message


def test_inconsistent_names_are_rejected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _fake_checkout(tmp_path, monkeypatch) / "demo"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text("---\nname: other\ndescription: x\n---\n# Demo\n")
    bundle = {"name": "demo", "description": "x", "metrics": ["gpu__time_duration.sum"]}
    bundle |= {"sections": [], "replay_mode": "kernel", "notes": ""}
    (folder / "bundle.json").write_text(json.dumps(bundle))
    with pytest.raises(NsightAgentError, match="share one name"):
        sk.list_skills()
    (folder / "SKILL.md").write_text("name: demo\n")
    with pytest.raises(NsightAgentError, match="front matter"):
        sk.list_skills()
    (folder / "SKILL.md").write_text("---\nname: demo\ndescription: x\n---\n")
    assert [s.name for s in sk.list_skills()] == ["demo"]
