"""Static checks of ``examples/`` and ``scripts/gpu-check`` (no GPU needed).

The examples themselves run on a GPU through ``scripts/gpu-check``; here we only check
what can break without one: syntax, the docstring, the ``__main__`` guard (the profiled
process imports each example again, so nothing may run at import time) and that each one
really uses ``nsight_agent.analyze.kernel``.
"""

from __future__ import annotations

import ast
import os
import py_compile
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES_DIR = ROOT / "examples"
GPU_CHECK = ROOT / "scripts" / "gpu-check"
EXAMPLES = sorted(EXAMPLES_DIR.glob("[0-9][0-9]_*.py"))
EXPECTED_NUMBERS = [f"{i:02d}" for i in range(12)]


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _is_main_guard(node: ast.stmt) -> bool:
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    test = node.test
    sides = [test.left, *test.comparators]
    return (
        len(test.ops) == 1
        and isinstance(test.ops[0], ast.Eq)
        and any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides)
        and any(isinstance(s, ast.Constant) and s.value == "__main__" for s in sides)
    )


def _uses_analyze_kernel(tree: ast.Module) -> bool:
    return any(
        isinstance(node, ast.Attribute)
        and node.attr == "kernel"
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "analyze"
        and isinstance(node.value.value, ast.Name)
        and node.value.value.id == "nsight_agent"
        for node in ast.walk(tree)
    )


def test_examples_00_to_11_exist() -> None:
    numbers = [p.name[:2] for p in EXAMPLES]
    for number in EXPECTED_NUMBERS:
        assert numbers.count(number) == 1, f"expected exactly one examples/{number}_*.py"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_compiles(path: Path, tmp_path: Path) -> None:
    py_compile.compile(str(path), cfile=str(tmp_path / "out.pyc"), doraise=True)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_has_docstring_with_run_line(path: Path) -> None:
    doc = ast.get_docstring(_tree(path))
    assert doc, f"{path.name} has no module docstring"
    assert f"python examples/{path.name}" in doc, f"{path.name}: docstring lacks how to run it"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_has_main_guard_and_nothing_runs_at_import(path: Path) -> None:
    body = _tree(path).body
    assert any(_is_main_guard(node) for node in body), f"{path.name}: no __main__ guard"
    # The profiled process imports the example again: a bare top-level call would run there.
    stray = [
        node.lineno
        for node in body[1:]
        if isinstance(node, ast.Expr) and not isinstance(node.value, ast.Constant)
    ]
    assert not stray, f"{path.name}: top-level expression statements at lines {stray}"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_uses_analyze_kernel(path: Path) -> None:
    assert _uses_analyze_kernel(_tree(path)), f"{path.name} never uses nsight_agent.analyze.kernel"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_plots_honour_output_folder(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    if "analyze.plot" in source or "output_prefix" in source:
        assert "NSIGHT_AGENT_EXAMPLE_OUT" in source, (
            f"{path.name} writes files but ignores NSIGHT_AGENT_EXAMPLE_OUT"
        )


def test_gpu_check_is_executable_bash() -> None:
    assert GPU_CHECK.is_file()
    assert os.access(GPU_CHECK, os.X_OK), "scripts/gpu-check is not executable"
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash not found")
    done = subprocess.run(
        [bash, "-n", str(GPU_CHECK)], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr


def test_gpu_check_contract() -> None:
    """The parts other tools rely on: interpreter choice, outputs, the final line."""
    text = GPU_CHECK.read_text(encoding="utf-8")
    assert "${PYTHON:-python3}" in text
    assert "-m pytest -m gpu -q" in text
    assert "examples/[0-9][0-9]_*.py" in text
    assert "gpu-check.log" in text and "gpu-check.md" in text
    assert '"$passed passed, $failed failed"' in text


# --- the sources we ship honour the harness's seed ------------------------------------------

CONTRACT_SOURCES = sorted((EXAMPLES_DIR / "contract").glob("*.py"))
SEEDING = {"manual_seed", "Generator", "seed", "default_rng"}


def _setup_seeds_itself(source: str) -> list[str]:
    """Calls inside ``setup`` that fix its own randomness (the harness's seed then changes
    nothing, and the integrity check warns "setup ignores the seed")."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == "setup":
            for call in ast.walk(node):
                if isinstance(call, ast.Call):
                    name = getattr(call.func, "attr", getattr(call.func, "id", ""))
                    if name in SEEDING:
                        found.append(f"line {call.lineno}: {name}(...)")
    return found


@pytest.mark.parametrize("path", CONTRACT_SOURCES, ids=lambda p: p.name)
def test_contract_examples_take_their_inputs_from_the_harness_seed(path: Path) -> None:
    assert not _setup_seeds_itself(path.read_text(encoding="utf-8")), path.name


def test_the_demo_source_builds_new_inputs_from_each_seed(tmp_path: Path) -> None:
    """The demo's setup once seeded a generator of its own: on the H200 every demo answer
    then carried the warning "setup ignores the seed"."""
    import importlib.util

    from nsight_agent import demo
    from nsight_agent.engine.harness import integrity, runtime

    assert not _setup_seeds_itself(demo.EXAMPLE_SOURCE)
    path = tmp_path / "demo_example.py"  # Triton's @jit reads its source from a file
    path.write_text(demo.EXAMPLE_SOURCE)
    spec = importlib.util.spec_from_file_location("demo_example", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    built = []
    for seed in (1, 2):
        runtime.seed_all(seed)
        built.append(runtime.build_inputs(module.setup, {"n": 64}, "cpu"))
    assert not integrity.seed_ignored(*built)
    assert _setup_seeds_itself("def setup(n):\n    g = torch.Generator().manual_seed(0)\n")
