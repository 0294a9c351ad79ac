"""The curated skill bundles in ``skills/``: each a SKILL.md workflow plus a bundle.json of
the metrics and sections it collects."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, Field

from nsight_agent.errors import InvalidRequestError, NsightAgentError
from nsight_agent.request import ReplayMode


class SkillBundle(BaseModel):
    """A curated metric bundle with its SKILL.md workflow (one folder under ``skills/``)."""

    name: str
    description: str
    metrics: list[str]
    sections: list[str]
    replay_mode: ReplayMode
    notes: str = ""
    skill_md: str = Field(
        description="The whole SKILL.md text: when to use, how to read, what next"
    )
    path: str = Field(description="Folder the bundle was read from")


def skills_dir() -> Path:
    """The checkout's ``skills/`` folder, else the copy a wheel ships as ``nsight_agent/skills``."""
    package = Path(__file__).resolve().parents[1]  # nsight_agent/
    candidates = [package.parent / "skills", package / "skills"]
    for path in candidates:
        if path.is_dir() and any(path.glob("*/SKILL.md")):
            return path
    raise NsightAgentError(
        "No skills folder was found (looked in " + ", ".join(map(str, candidates)) + ").",
        "Reinstall nsight-agent (the wheel ships nsight_agent/skills), or run from a clone "
        "of the repository.",
    )


def _front_matter(text: str, where: Path) -> dict[str, str]:
    """``key: value`` pairs between the leading ``---`` lines of a SKILL.md."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise NsightAgentError(f"{where} does not start with YAML front matter (---).")
    out: dict[str, str] = {}
    for line in lines[1:]:
        if line.strip() == "---":
            return out
        key, sep, value = line.partition(":")
        if not sep or not key.strip():
            raise NsightAgentError(f"{where}: front matter line is not 'key: value': {line!r}")
        out[key.strip()] = value.strip().strip("\"'")
    raise NsightAgentError(f"{where}: front matter is not closed by a --- line.")


def _load_skill(folder: Path) -> SkillBundle:
    skill_md = (folder / "SKILL.md").read_text(encoding="utf-8")
    meta = _front_matter(skill_md, folder / "SKILL.md")
    data = json.loads((folder / "bundle.json").read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise NsightAgentError(f"{folder / 'bundle.json'} is not a JSON object.")
    name = data.get("name")
    if name != folder.name or meta.get("name") != folder.name:
        raise NsightAgentError(
            f"{folder}: the folder, bundle.json and SKILL.md must share one name "
            f"(got {name!r} and {meta.get('name')!r})."
        )
    return SkillBundle.model_validate({**data, "skill_md": skill_md, "path": str(folder)})


def list_skills() -> list[SkillBundle]:
    """Every bundle under ``skills/``, by name."""
    root = skills_dir()
    return [
        _load_skill(folder)
        for folder in sorted(root.iterdir())
        if folder.is_dir() and (folder / "bundle.json").is_file()
    ]


def get_skill(name: str) -> SkillBundle:
    """One bundle by name; ``InvalidRequestError`` lists the names when it does not exist."""
    root = skills_dir()
    folder = root / name
    if (
        "/" in name
        or "\\" in name
        or name.startswith(".")
        or not (folder / "bundle.json").is_file()
    ):
        names = [s.name for s in list_skills()]
        raise InvalidRequestError(f"No skill named {name!r}.", f"Available: {', '.join(names)}.")
    return _load_skill(folder)
