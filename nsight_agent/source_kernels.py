"""Which kernels a user's source defines (``@triton.jit`` functions and CUDA ``__global__``
functions in any string of it), and a kernel's bare name as profilers spell it. Read where a
kernel's owner is named (``diagnose/owner.py``), where launch sampling matches ncu's kernels
to CUPTI's (``base_name``), and where the collect stage decides whether torch operator ranges
would add anything (``engine/collection/collect/plain.py``).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Set

_GLOBAL = re.compile(r"__global__[^(;{]*?\b(\w+)\s*\(")
_BOUNDS = re.compile(r"__launch_bounds__\s*\([^)]*\)")


def user_kernel_names(source: str) -> set[str]:
    """Kernel names the user's source defines: ``@triton.jit`` functions and CUDA
    ``__global__`` functions in any string (load_inline, cupy, raw modules)."""
    names: set[str] = set()
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return names
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for dec in node.decorator_list:
                text = ast.unparse(dec)
                if "jit" in text or "autotune" in text or "heuristics" in text:
                    names.add(node.name)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.update(m.group(1) for m in _GLOBAL.finditer(_BOUNDS.sub("", node.value)))
    return names


def defined_by(sources: Iterable[str | None]) -> set[str]:
    """Kernel names any of ``sources`` defines (None: a variant without a source of its own)."""
    return {name for source in sources if source for name in user_kernel_names(source)}


_ANON = re.compile(r"\(anonymous namespace\)::|<unnamed>::")  # CUPTI's and ncu's spellings


def base_name(name: str) -> str:
    """A kernel's bare function name, as ncu's report and CUPTI's demangled name both hold
    it: no return type, namespace, template arguments or parameters."""
    bare = _ANON.sub("", name).strip()
    bare = bare.removeprefix("void ").split("<", 1)[0].split("(", 1)[0]
    return bare.rsplit("::", 1)[-1].strip()


def defined_in(kernel: str, names: Set[str]) -> bool:
    """Whether ``kernel`` (as a profiler names it: plain, demangled or templated) is one of
    ``names``."""
    return kernel in names or base_name(kernel) in names
