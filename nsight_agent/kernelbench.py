"""KernelBench's format, read with ``ast`` (nothing is imported): is a source a problem, its
module constants, the classes it defines, and KernelBench's correctness rule and timing as
numbers.

A problem defines ``class Model``, ``get_inputs()`` and ``get_init_inputs()``, its sizes as
module constants (``M = 1024``); a candidate defines ``class ModelNew``. The harness side
(``engine/harness/languages/kernelbench.py``) turns both into the kernel contract's setup and entries.
"""

from __future__ import annotations

import ast

PROBLEM_CLASS = "Model"
CANDIDATE_CLASS = "ModelNew"

TRIALS = 5
"""Seeded correctness trials per config under ``correctness="kernelbench"`` (its eval's default)."""

# Its timing (``timing.py``'s ``cuda_event`` method, as its eval calls it): warm-up calls,
# timed trials of which the first ones are discarded, each after a write of 32 x 1024 x 1024
# int64 (256 MiB) that flushes the L2; its runtime is the trials' mean.
PERF_TRIALS = 100  # its run_and_check's num_perf_trials
WARMUP = 3
DISCARD = 1
FLUSH_SHAPE = (32, 1024, 1024)

TOLERANCES: dict[str, float] = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 1e-2}
"""atol = rtol per output dtype, as KernelBench's ``get_tolerance_for_precision`` (since its
precision support of 2025-11; v0 and v0.1 used 1e-2 for fp32 too). Other dtypes keep ours."""


def tolerances(rtol: float | None, atol: float | None) -> dict[str, tuple[float, float]]:
    """(rtol, atol) per dtype name under KernelBench's rule; values given in a request win."""
    return {
        dtype: (tol if rtol is None else rtol, tol if atol is None else atol)
        for dtype, tol in TOLERANCES.items()
    }


def _tree(source: str) -> ast.Module | None:
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError):  # ValueError: a NUL byte in the source
        return None


def _defined(tree: ast.Module, kind: type[ast.stmt]) -> set[str]:
    """Names of the module-level classes (``kind=ast.ClassDef``) or functions it defines."""
    return {node.name for node in tree.body if isinstance(node, kind) and hasattr(node, "name")}


def _assigned(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            names.add(node.target.id)
    return names


def is_kernelbench(source: str) -> bool:
    """A KernelBench problem: defines ``Model`` and ``get_inputs`` at module level, and no
    ``setup`` (a source with ``setup`` follows our kernel contract). A source that does not
    parse is not one (the usual path then reports its syntax error)."""
    tree = _tree(source)
    return tree is not None and is_problem(tree)


def is_problem(tree: ast.Module) -> bool:
    """``is_kernelbench`` of a source already parsed."""
    classes = _defined(tree, ast.ClassDef)
    functions = _defined(tree, ast.FunctionDef) | _defined(tree, ast.AsyncFunctionDef)
    return PROBLEM_CLASS in classes and "get_inputs" in functions and "setup" not in functions


def module_constants(source: str) -> list[str]:
    """Names a config may override: module-level assignments to plain names (``M = 1024``,
    ``batch_size: int = 16``), not dunders; sorted."""
    tree = _tree(source)
    if tree is None:
        return []
    return sorted(n for n in _assigned(tree) if not n.startswith("__"))
