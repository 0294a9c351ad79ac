"""Which sources of a request build a library that is not in the cache yet: what the
executor builds ahead, before the job queues for a GPU (``executors/build_ahead.py``).

Read from the request alone, without importing anything: a Python source that builds a torch
extension at import (``ext_builds.builds_extensions``) whose folder holds no finished build;
and for the ``cuda`` language its source, given in the request or as literal ``CUDA_SOURCE``
and ``CUDA_FUNCTIONS`` in the main module (a computed one is left to the harness, which
builds it in the GPU's turn, as before). The files are the run folder's, as ``render``
writes them, so a build child imports each module under the name the harness gives it.
"""

from __future__ import annotations

import ast
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from nsight_agent.engine.harness import cuda_build, ext_builds, render
from nsight_agent.request import ProfileRequest


@dataclass
class BuildTask:
    """One build: a module's imports (``ext``) or the ``cuda`` language's source."""

    kind: Literal["ext", "cuda"]
    module: str  # the harness's module name (the cuda source: the main module's)
    file: str  # the module's file name among the plan's files
    folder: str  # the build folder, where the record of the build ahead goes
    source: str | None = None  # cuda: the CUDA source and the functions it exposes
    functions: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class BuildPlan:
    language: str
    cache: Path  # the cache root every build folder is under
    files: dict[str, str]  # file name -> text, as in the run folder
    tasks: list[BuildTask]


def plan(request: ProfileRequest, cache: Path) -> BuildPlan:
    """The builds ``request`` still needs under ``cache`` (none: an empty ``tasks``)."""
    spec, files = render.spec_for(request, cache)
    files = {name: as_read(text) for name, text in files.items()}
    tasks: dict[str, BuildTask] = {}
    for variant in [{"module": spec["setup_module"]}, *spec["variants"]]:
        module = str(variant["module"])
        text = files[f"{module}.py"]
        folder = ext_builds.folder_for(cache, text)
        if ext_builds.builds_extensions(text) and not (folder / ext_builds.MARKER).is_file():
            tasks.setdefault(str(folder), BuildTask("ext", module, f"{module}.py", str(folder)))
    main = spec["setup_module"]
    if request.language == "cuda":
        source, functions = cuda_of(request, files[f"{main}.py"])
        if source and functions:
            key = cuda_build.source_key(source, functions, cuda_build.CUDA_FLAGS)
            folder = cache / key
            done = any(folder.glob("*.so")) or (folder / "nvcc-check.ok").is_file()
            if not done:
                tasks[str(folder)] = BuildTask(
                    "cuda", main, f"{main}.py", str(folder), source, list(functions)
                )
    return BuildPlan(request.language, cache, files, list(tasks.values()))


def cuda_of(request: ProfileRequest, main_text: str) -> tuple[str | None, list[str]]:
    """The ``cuda`` language's source and functions as the harness will take them: the
    request's, else the main module's literal ``CUDA_SOURCE`` / ``CUDA_FUNCTIONS``."""
    found = literals(main_text, ("CUDA_SOURCE", "CUDA_FUNCTIONS"))
    source = request.cuda_source or found.get("CUDA_SOURCE")
    functions = list(request.cuda_functions) or found.get("CUDA_FUNCTIONS") or []
    if not isinstance(source, str) or not isinstance(functions, (list, tuple)):
        return None, []
    return source, [str(f) for f in functions]


def literals(text: str, names: tuple[str, ...]) -> dict[str, Any]:
    """Top-level ``NAME = <literal>`` assignments of a module (the last one wins)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return {}
    out: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name) and target.id in names:
                try:
                    out[target.id] = ast.literal_eval(node.value)
                except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                    out.pop(target.id, None)  # computed: the harness reads it at import
    return out


def as_read(text: str) -> str:
    """A source as the harness reads its file back (universal newlines), which is the text
    its build folder is named by."""
    return text.replace("\r\n", "\n").replace("\r", "\n")
