"""The layout is the pipeline: every import points inward and there is no cycle.

Walks the package's imports with ``ast`` (top-level, function-level and type-checking ones
alike) and checks them against the layers of docs/ARCHITECTURE.md. A new module must be given a
layer here. An import that names a package (``from nsight_agent import x``, ``import
nsight_agent``) depends on that package's ``__init__``, which runs first and is read from.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "nsight_agent"

# Lower numbers are inner layers; a module may import its own layer or an inner one.
LAYERS: dict[str, int] = {
    "errors": 0,
    "request": 0,
    "options": 0,
    "arguments": 0,
    "annotation": 0,
    "exceptions": 0,
    "kernelbench": 0,
    "source_shape": 0,
    "source_kernels": 0,
    "numbers": 0,
    "device_facts": 0,
    "wording": 0,
    "time_basis": 0,
    "stages": 0,
    "engine": 1,
    "catalog": 2,
    "diagnose": 2,
    "judge": 3,
    "views": 4,
    "service": 5,
    "api": 5,
    "experimental": 5,
    "server": 6,
    "cli": 7,
    "demo": 7,
    "__main__": 8,
    "__init__": 8,
}
# The engine's rooms, inner first: a module may import its own room or an inner one, so the
# arrows between rooms point one way (docs/ARCHITECTURE.md draws them).
ENGINE_ROOMS: dict[str, int] = {
    "engine.process": 0,
    "engine.children": 0,
    "engine.bytecode": 0,
    "engine.pinning": 0,
    "engine.thermal": 0,
    "engine.harness": 1,
    "engine.store": 2,
    "engine.collection": 3,
    "engine.collection.collect": 4,
    "engine.device": 4,
    "engine.worker": 4,
    "engine.pipeline": 5,
    "engine.executors": 6,
    "engine.executors.ray": 7,
}
# At most this many modules directly in engine/: the rest live in rooms named for their job.
ENGINE_FLAT_LIMIT = 8
# Modules that run in other processes (the profiled child, the warm worker, the harness) may
# pull in neither the front ends nor the executors that schedule them.
CHILD_SIDE = (
    "engine.worker.child",
    "engine.worker.entry",
    "engine.worker.main",
    "engine.worker.timing",
    "engine.worker.shipping",
    "engine.worker.target",
    "engine.worker.job_state",
    "engine.harness",
)


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(parts)


def layer(name: str) -> int:
    top = name.split(".")[0]
    if top not in LAYERS:
        raise AssertionError(f"nsight_agent.{name} has no layer: add it to LAYERS")
    return LAYERS[top]


def imports_of(path: Path) -> set[str]:
    """Modules of this package that ``path`` imports, as names relative to the package."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            # "from pkg import sub" depends on pkg too: it runs while pkg's __init__ may still
            # be importing this very module.
            base = node.module
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for n in names:
            if n == "nsight_agent":  # the package itself: its __init__, module "__init__"
                found.add("__init__")
                continue
            if not n.startswith("nsight_agent."):
                continue
            rel = n[len("nsight_agent.") :]
            # "from nsight_agent.engine import ncu" names module engine.ncu; keep the longest
            # prefix that is a real module or package.
            parts = rel.split(".")
            for i in range(len(parts), 0, -1):
                candidate = PACKAGE.joinpath(*parts[:i])
                if candidate.with_suffix(".py").is_file() or (candidate / "__init__.py").is_file():
                    found.add(".".join(parts[:i]))
                    break
    return found


def graph() -> dict[str, set[str]]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        out[module_name(path)] = imports_of(path)
    return out


def test_every_import_points_inward() -> None:
    wrong = []
    for mod, deps in graph().items():
        if mod == "__init__":
            continue
        for dep in deps:
            # The front ends may name the package (``from nsight_agent import service``,
            # ``__version__``); below them that is an outward import of its __init__.
            if dep == "__init__" and layer(mod) >= LAYERS["server"]:
                continue
            if layer(dep) > layer(mod):
                wrong.append(f"{mod} (layer {layer(mod)}) imports {dep} (layer {layer(dep)})")
    assert not wrong, "\n".join(sorted(wrong))


def test_no_import_cycles() -> None:
    # A module importing from its own package depends on the package's __init__ too (it runs
    # first and is read from): ``from nsight_agent import annotation`` in the engine, and
    # ``from nsight_agent.cli import output`` in the CLI's commands, closed cycles.
    edges = {m: {d for d in deps if d != m} for m, deps in graph().items()}
    state: dict[str, int] = {}
    cycle: list[str] = []

    def closes_a_cycle(node: str, stack: list[str]) -> bool:
        state[node] = 1
        for dep in sorted(edges.get(node, ())):
            if state.get(dep) == 1:
                cycle.extend(
                    [*stack[stack.index(dep) :], node, dep] if dep in stack else [node, dep]
                )
                return True
            if state.get(dep) is None and closes_a_cycle(dep, [*stack, node]):
                return True
        state[node] = 2
        return False

    for node in sorted(edges):
        if state.get(node) is None and closes_a_cycle(node, []):
            break
    assert not cycle, " -> ".join(cycle)


# The front ends reach the engine through nsight_agent.service only; what a server itself
# owns (its children, from start-up to shutdown) is named here.
FRONT_ENDS = ("server", "cli", "demo")
FRONT_END_ENGINE_ALLOWED = {
    ("server.app", "engine.children"),
    ("server.shutdown", "engine.children"),
}


def test_front_ends_reach_the_engine_through_the_service_layer_only() -> None:
    wrong = []
    for mod, deps in graph().items():
        if mod.split(".")[0] not in FRONT_ENDS:
            continue
        for dep in deps:
            if dep.startswith("engine.") and (mod, dep) not in FRONT_END_ENGINE_ALLOWED:
                wrong.append(f"{mod} imports {dep}")
    assert not wrong, "\n".join(sorted(wrong))


def test_views_only_shape_what_they_are_given() -> None:
    """The views import nothing from the engine (the judge reads runs and reports and decides;
    the views shape and render), and the judge imports no view, service or front end."""
    wrong = []
    for mod, deps in graph().items():
        top = mod.split(".")[0]
        for dep in deps:
            if top == "views" and dep.split(".")[0] == "engine":
                wrong.append(f"{mod} imports {dep}")
            if top == "judge" and layer(dep) > LAYERS["judge"]:
                wrong.append(f"{mod} imports {dep}")
    assert not wrong, "\n".join(sorted(wrong))


def room(name: str) -> str | None:
    """The engine room of module ``name`` (the longest matching prefix), None outside engine."""
    found = [r for r in ENGINE_ROOMS if name == r or name.startswith(r + ".")]
    if not name.startswith("engine.") or name in ("engine", "engine.__init__"):
        return None
    if not found:
        raise AssertionError(f"nsight_agent.{name} is in no engine room: add it to ENGINE_ROOMS")
    return max(found, key=len)


def test_arrows_between_engine_rooms_point_one_way() -> None:
    wrong = []
    for mod, deps in graph().items():
        here = room(mod)
        if here is None:
            continue
        for dep in deps:
            there = room(dep)
            if there is not None and ENGINE_ROOMS[there] > ENGINE_ROOMS[here]:
                wrong.append(f"{mod} ({here}) imports {dep} ({there})")
    assert not wrong, "\n".join(sorted(wrong))


def test_the_engine_is_a_few_rooms() -> None:
    flat = sorted(p.stem for p in (PACKAGE / "engine").glob("*.py") if p.stem != "__init__")
    assert len(flat) <= ENGINE_FLAT_LIMIT, flat
    rooms = sorted(p.name for p in (PACKAGE / "engine").iterdir() if (p / "__init__.py").is_file())
    assert rooms == ["collection", "executors", "harness", "store", "worker"], rooms


def test_the_other_processes_import_no_front_end_and_no_executor() -> None:
    for mod, deps in graph().items():
        if mod.startswith(CHILD_SIDE):
            front = [d for d in deps if layer(d) >= LAYERS["views"]]
            assert not front, f"{mod} imports {front}"
            scheduling = [d for d in deps if d.startswith(("engine.executors", "engine.pipeline"))]
            assert not scheduling, f"{mod} imports {scheduling}"


def test_the_ray_executor_imports_no_front_end() -> None:
    for mod, deps in graph().items():
        if mod.startswith("engine.executors.ray"):
            front = [d for d in deps if layer(d) >= LAYERS["views"]]
            assert not front, f"{mod} imports {front}"


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=module_name)
def test_modules_and_functions_stay_readable(path: Path) -> None:
    """No module over ~400 lines and no function over ~80, except those named here with why."""
    long_modules = {
        # nsight-python's public signatures (overloads) and the per-option checks are long.
        "api.analyze": 480,
    }
    name = module_name(path)
    lines = path.read_text().count("\n")
    assert lines <= long_modules.get(name, 420), f"{name}: {lines} lines"
    tree = ast.parse(path.read_text())
    long_functions = {
        # Tool signatures: each parameter is a schema field with its description.
        "profile_kernel",
        "compare_variants",
        "roofline_metrics",
        "diagnose_kernel",
        "kernel",
        "profile",
        # One formula a line, read top to bottom (the module docstring states them).
        "roofline",
    }
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            size = (node.end_lineno or node.lineno) - node.lineno + 1
            if node.name not in long_functions:
                assert size <= 90, f"{name}.{node.name}: {size} lines"


# --- docs/ARCHITECTURE.md's module table, generated from the package itself ---------------

DOC = PACKAGE.parent / "docs" / "ARCHITECTURE.md"
TABLE_START, TABLE_END = "<!-- modules:start -->", "<!-- modules:end -->"
LAYER_NAMES = {0: "leaf", 1: "engine", 2: "catalog / diagnose", 3: "judge", 4: "views"}
LAYER_NAMES |= {5: "service / api", 6: "server", 7: "front end", 8: "package"}


def summary(path: Path) -> str:
    """A module's job: the first sentence of its docstring."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    first = " ".join(doc.split("\n\n")[0].split())
    cut = first.find(". ")
    return (first[: cut + 1] if cut >= 0 else first).replace("|", "\\|")


def where(name: str) -> str:
    here = room(name)
    if here is not None:
        return f"engine room `{here.removeprefix('engine.')}`"
    return f"layer {layer(name)} ({LAYER_NAMES[layer(name)]})"


def modules_table() -> str:
    g = graph()
    rows = ["| module | where | what it does |", "| --- | --- | --- |"]
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path)
        rel = path.relative_to(PACKAGE.parent).as_posix()
        rows.append(f"| `{rel}` | {where(name)} | {summary(path)} |")
    arrows: dict[str, set[str]] = {}
    for mod, deps in g.items():
        here = room(mod)
        for dep in deps:
            there = room(dep)
            if here and there and there != here:
                arrows.setdefault(here.removeprefix("engine."), set()).add(
                    there.removeprefix("engine.")
                )
    lines = [f"- `{r}` -> {', '.join(f'`{d}`' for d in sorted(arrows[r]))}" for r in sorted(arrows)]
    head = "Arrows between the engine's rooms (imports):"
    return "\n".join([TABLE_START, *rows, "", head, "", *lines, TABLE_END])


def test_the_architecture_doc_names_every_module_as_it_is() -> None:
    text = DOC.read_text()
    start, end = text.index(TABLE_START), text.index(TABLE_END) + len(TABLE_END)
    assert text[start:end] == modules_table(), (
        "docs/ARCHITECTURE.md's module table is stale: run `python -m tests.test_architecture`"
    )


if __name__ == "__main__":
    text = DOC.read_text()
    start, end = text.index(TABLE_START), text.index(TABLE_END) + len(TABLE_END)
    DOC.write_text(text[:start] + modules_table() + text[end:])
