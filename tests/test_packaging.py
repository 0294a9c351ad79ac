"""The wheel is self-sufficient: templates, skills and bundled data come with the package.

Builds the wheel from this checkout, unpacks it into a folder of its own and imports
nsight_agent from there (never from the checkout), then lists the skills and runs a real
pre-flight (rendered harness, torch on the CPU) with the wheel's templates.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.project_copy import copy_project

ROOT = Path(__file__).resolve().parents[1]

USE_INSTALLED = """
import json, sys
from pathlib import Path

import nsight_agent
from nsight_agent.catalog import skills
from nsight_agent.engine import pipeline
from nsight_agent.engine.harness import render
from nsight_agent.request import ProfileRequest, Variant

site, runs, source = (Path(a) for a in sys.argv[1:4])
request = ProfileRequest(
    source=source.read_text(),
    language="torch",
    configs={"rows": [4], "cols": [8]},
    variants=[Variant(name="torch", entry="run"), Variant(name="manual", entry="manual_softmax")],
)
pre = pipeline.preflight(request, runs_root=runs, device="cpu")
print(json.dumps({
    "package": str(Path(nsight_agent.__file__).resolve()),
    "templates": str(render.templates_dir().resolve()),
    "skills_dir": str(skills.skills_dir().resolve()),
    "skills": sorted(s.name for s in skills.list_skills()),
    "preflight_ok": pre.ok,
    "checks_ok": [c.ok for c in pre.checks],
}))
"""


def test_wheel_ships_templates_and_skills(tmp_path: Path) -> None:
    # Build from a fresh copy: setuptools reuses a checkout's build/ folder, stale files included.
    src = copy_project(tmp_path / "src")
    wheels = tmp_path / "wheels"
    pip_wheel = ["pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels)]
    subprocess.run(
        [sys.executable, "-m", *pip_wheel, str(src)],
        check=True,
        capture_output=True,
        cwd=tmp_path,
    )
    (wheel,) = wheels.glob("nsight_agent-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder, pattern in (("templates", "*.j2"), ("skills", "*/*")):
        shipped = {
            f"nsight_agent/{folder}/{p.relative_to(ROOT / folder)}"
            for p in (ROOT / folder).glob(pattern)
        }
        assert shipped and shipped <= names, sorted(shipped - names)

    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    source = ROOT / "examples" / "contract" / "torch_softmax.py"
    proc = subprocess.run(
        [sys.executable, "-c", USE_INSTALLED, str(site), str(tmp_path / "runs"), str(source)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        check=False,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    for key in ("package", "templates", "skills_dir"):
        assert Path(seen[key]).is_relative_to(site.resolve()), (key, seen[key])
    assert seen["skills"] == sorted(p.parent.name for p in (ROOT / "skills").glob("*/SKILL.md"))
    assert seen["preflight_ok"] is True and seen["checks_ok"] == [True, True]


def test_every_package_is_listed_for_the_wheel() -> None:
    """A package folder missing from pyproject's list is missing from the wheel (the CLI was
    once): compare the folders with an __init__.py against the list."""
    import tomllib

    root = Path(__file__).resolve().parents[1]
    listed = set(
        tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        ".".join(p.parent.relative_to(root).parts)
        for p in (root / "nsight_agent").rglob("__init__.py")
    }
    assert found <= listed, sorted(found - listed)


def test_the_server_and_the_cli_start_without_torch() -> None:
    """`pip install nsight-agent` has no torch: the server, the CLI and the report readers must
    import without it (only running a kernel needs it, and then says how to install it)."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['triton'] = None\n"
        "import nsight_agent.server.app, nsight_agent.service, nsight_agent.cli\n"
        "import nsight_agent.views.diagnosis, nsight_agent.engine.pipeline\n"
        "print('ok')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_the_readme_install_command_works_as_written(tmp_path: Path) -> None:
    """The README's reports-only install, run as written in a clean virtual environment made
    from a fresh copy of the clone, then the command it installs reads a bundled report."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Install", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    (command,) = [line.split("#")[0].strip() for line in block.splitlines() if "report" in line]
    assert command == "pip install .", command
    clone = copy_project(tmp_path / "clone")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = [str(venv / "bin" / "python"), "-m", *command.split()[:2], "-q", *command.split()[2:]]
    done = subprocess.run(pip, cwd=clone, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report = ROOT / "tests" / "fixtures" / "h200_bf16_matmul_sections.ncu-rep"
    shown = subprocess.run(
        [str(venv / "bin" / "nsight-agent"), "report", str(report), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=tmp_path,
    )
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert json.loads(shown.stdout)["kernels_total"] >= 1
