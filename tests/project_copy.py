"""A copy of the files a build of the project reads, so a test that runs pip on it writes
nothing in this checkout."""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD_INPUTS = ("pyproject.toml", "README.md", "LICENSE", "nsight_agent", "templates", "skills")


def copy_project(into: Path) -> Path:
    """``into`` (made here) holding the build's inputs, bytecode left behind."""
    into.mkdir()
    for name in BUILD_INPUTS:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, into / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, into / name)
    return into
