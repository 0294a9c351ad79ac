"""KernelBench's format, read with ``ast`` (nothing is imported): is a source a problem, its
module constants, the classes it defines, and KernelBench's correctness rule and timing as
numbers.

A problem defines ``class Model``, ``get_inputs()`` and ``get_init_inputs()``, its sizes as
module constants (``M = 1024``); a candidate defines ``class ModelNew``. The harness side
(``engine/harness/languages/kernelbench.py``) turns both into the kernel contract's setup and entries.
"""

from __future__ import annotations

import ast
from typing import Any

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


_ARITHMETIC: dict[type[ast.operator], Any] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Div: lambda a, b: a / b,
    ast.Mod: lambda a, b: a % b,
    ast.Pow: lambda a, b: a**b if abs(b) <= 64 else None,
}


def _value(node: ast.expr, known: dict[str, Any]) -> Any:
    """A constant expression's value: literals, earlier constants, arithmetic and tuples of
    them; None for anything else (a call, an attribute: nothing is run)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float | str | bool):
        return node.value
    if isinstance(node, ast.Name):
        return known.get(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _value(node.operand, known)
        return -inner if isinstance(inner, int | float) else None
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        a, b = _value(node.left, known), _value(node.right, known)
        numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (a, b))
        try:
            return _ARITHMETIC[type(node.op)](a, b) if numbers else None
        except (ArithmeticError, ValueError):
            return None
    if isinstance(node, ast.Tuple | ast.List):
        items = [_value(e, known) for e in node.elts]
        return tuple(items) if all(i is not None for i in items) else None
    return None


def sizes(source: str) -> dict[str, Any]:
    """A problem's sizes: the module constants its ``get_inputs`` and ``get_init_inputs``
    read (``batch_size``, ``features``), in source order, each with its value where it is a
    number, string or flag (literal, or arithmetic of literals and earlier constants): the
    values a config may override, which with no config are what it ran at. Empty for a source
    that is not a problem."""
    tree = _tree(source)
    if tree is None or not is_problem(tree):
        return {}
    known: dict[str, Any] = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(target, ast.Name) and value:
            found = _value(value, known)
            if isinstance(found, int | float | str) and not target.id.startswith("__"):
                known[target.id] = found
    read = {
        n.id
        for f in tree.body
        if isinstance(f, ast.FunctionDef) and f.name in ("get_inputs", "get_init_inputs")
        for n in ast.walk(f)
        if isinstance(n, ast.Name)
    }
    return {name: value for name, value in known.items() if name in read}
