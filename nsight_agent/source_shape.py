"""What a kernel source says of itself, read with ``ast`` (nothing is imported): whether it
compiles, the names its module binds, and the language it is written for.

The validation stage (``service/validate.py``) asks these before anything runs; the request
(``request.py``) asks the language of a source sent without one.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

import nsight_agent.kernelbench as kernelbench

CUDA_SOURCE = "CUDA_SOURCE"

# Names that let a module bind names no statement shows (``globals()["run"] = f``).
_DYNAMIC = frozenset({"globals", "exec"})
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


@dataclass(frozen=True)
class Unparsable:
    """A source Python refuses to compile: the line (None when it has none) and why."""

    line: int | None
    message: str


def read(source: str, filename: str = "<source>") -> ast.Module | Unparsable:
    """The module's tree, or why it does not compile. Compiled in full, not only parsed, so
    what the compiler alone refuses (``return`` outside a function) is found too."""
    try:
        compile(source, filename, "exec", dont_inherit=True)
        return ast.parse(source, filename)
    except SyntaxError as err:
        return Unparsable(err.lineno, err.msg)
    except ValueError as err:  # a NUL byte in the source
        return Unparsable(None, str(err))


def _targets(node: ast.AST) -> set[str]:
    """Names an assignment target binds (``a``, ``a, b``, ``[a, *b]``)."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _binds(stmt: ast.stmt) -> set[str]:
    """Names one module-level statement binds, looking inside the blocks that run at import
    (``if``, ``try``, ``with``, loops), not inside functions or classes."""
    names: set[str] = set()
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        names.add(stmt.name)
    elif isinstance(stmt, ast.Assign):
        for target in stmt.targets:
            names |= _targets(target)
    elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)) and isinstance(stmt.target, ast.Name):
        names.add(stmt.target.id)
    elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
        for alias in stmt.names:
            names.add(alias.asname or alias.name.split(".")[0])
    elif isinstance(stmt, (ast.For, ast.AsyncFor)):
        names |= _targets(stmt.target)
    elif isinstance(stmt, (ast.With, ast.AsyncWith)):
        for item in stmt.items:
            names |= _targets(item.optional_vars) if item.optional_vars else set()
    for block in ("body", "orelse", "finalbody"):
        if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for inner in getattr(stmt, block, []):
                names |= _binds(inner)
    for handler in getattr(stmt, "handlers", []):
        names |= {handler.name} if handler.name else set()
        for inner in handler.body:
            names |= _binds(inner)
    for case in getattr(stmt, "cases", []):
        for inner in case.body:
            names |= _binds(inner)
    return names


def _module_level(node: ast.AST) -> list[ast.AST]:
    """The nodes that run at import: everything but the bodies of functions and classes
    (a class's decorators, bases and keywords run; its body binds the class's names)."""
    out: list[ast.AST] = []
    for child in ast.iter_child_nodes(node):
        out.append(child)
        if not isinstance(child, _SCOPES):
            out += _module_level(child)
    return out


def bound_names(tree: ast.Module) -> frozenset[str] | None:
    """The names the module binds at import; None when that cannot be told from the text (a
    star import, a module ``__getattr__``, ``globals()`` or ``exec`` anywhere, a ``global``
    statement in a function)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            return None
        if isinstance(node, ast.Name) and node.id in _DYNAMIC:
            return None
        if isinstance(node, ast.Global):
            return None
    names: set[str] = set()
    for stmt in tree.body:
        names |= _binds(stmt)
    names |= {
        n.target.id
        for n in _module_level(tree)
        if isinstance(n, ast.NamedExpr) and isinstance(n.target, ast.Name)
    }
    if "__getattr__" in names:
        return None
    return frozenset(names)


def binds(tree: ast.Module, name: str) -> bool:
    """Whether the module binds ``name`` at import (True where it cannot be told)."""
    names = bound_names(tree)
    return names is None or name in names


def defines_cuda_source(tree: ast.Module) -> bool:
    """The module binds ``CUDA_SOURCE``, the contract's C++/CUDA source (False where that
    cannot be told)."""
    names = bound_names(tree)
    return names is not None and CUDA_SOURCE in names


def detect_language(source: str, cuda_source: str | None = None) -> str | None:
    """The language of a source sent without one: ``kernelbench`` for a KernelBench problem
    (``Model`` and ``get_inputs``, no ``setup``), ``cuda`` for a contract source with C++/CUDA
    (a ``cuda_source`` given, or a module-level ``CUDA_SOURCE``); None otherwise (the
    request's default then applies). A source that does not compile says nothing."""
    tree = read(source)
    if isinstance(tree, Unparsable):
        return "cuda" if cuda_source else None
    if kernelbench.is_problem(tree):
        return "kernelbench"
    if cuda_source or defines_cuda_source(tree):
        return "cuda"
    return None


def init_parameters(tree: ast.Module, cls: str) -> list[str]:
    """The parameters ``cls.__init__`` (a module-level class) requires beyond ``self``: those
    without a default, ``*args`` and ``**kwargs`` aside; [] where it has no ``__init__``."""
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for f in node.body:
                if isinstance(f, ast.FunctionDef) and f.name == "__init__":
                    positional = [*f.args.posonlyargs, *f.args.args][1:]
                    required = positional[: len(positional) - len(f.args.defaults)]
                    kw = [a for a, d in zip(f.args.kwonlyargs, f.args.kw_defaults) if d is None]
                    return [a.arg for a in [*required, *kw]]
    return []
