"""Library code inlined into a kernel, counted at the user's line that called it.

A kernel's SASS holds the inlined bodies of the libraries it calls: Triton's
``triton/language/standard.py`` (``tl.max``, ``tl.sum``, ``tl.sigmoid``), CUTLASS, CUB or cute
headers, torch's and the CUDA toolkit's headers. ncu's source correlation
(``IAction.source_info``) names the innermost line, the library's, and the report's API gives
no inlining chain (Triton's binaries carry none). The user can change only their own line, so a
library line's samples are moved to the user's line that called it:

- in a Python library whose text the report holds, the library line's function and every
  function of that file that reaches it (``max`` for ``_elementwise_max``) are the names it
  may have been called by; the user's lines of this kernel that call one of them
  (``tl.max(``) are the call sites, and of several the one nearest in the SASS to each
  library instruction is chosen (two ``tl.sum`` calls split their samples);
- otherwise (a C++ header, no text, no line that names a call) the user's line nearest in
  the SASS, the code the compiler placed the inlined body among.

The library line stays as the detail: ``tl.max in standard.py:170``, or ``standard.py:170
(nearest in the SASS)`` where no call names it. A kernel with no line of the user's keeps its
library lines as they are.
"""

from __future__ import annotations

import ast
import bisect
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass

Where = tuple[str, int]  # (file as the report names it, line)

# Path parts of code the user did not write: installed packages, toolkits, system headers.
LIBRARY_PARTS = (
    "/site-packages/",
    "/dist-packages/",
    "/triton/language/",
    "/cutlass/",
    "/cute/",
    "/cub/",
    "/thrust/",
    "/libcudacxx/",
    "/cuda/std/",
    "/torch/include/",
    "/ATen/",
    "/c10/",
    "/usr/include/",
    "/usr/local/cuda",
    "/targets/x86_64-linux/include/",
    "/targets/sbsa-linux/include/",
)
CHAIN_LIMIT = 12  # names followed up a library's call graph


@functools.lru_cache(maxsize=256)
def is_library(path: str) -> bool:
    """Whether a source path is a library's (installed package, toolkit or system header)."""
    path = "/" + path.replace("\\", "/").lstrip("/")
    return any(part in path for part in LIBRARY_PARTS)


def _basename(path: str) -> str:
    return path.replace("\\", "/").rsplit("/", 1)[-1]


@dataclass(frozen=True)
class CallGraph:
    """A Python file's functions (name, first line, last line) and, per name, the functions
    whose bodies refer to it."""

    funcs: tuple[tuple[str, int, int], ...]
    callers: dict[str, frozenset[str]]

    @classmethod
    def of(cls, text: str) -> CallGraph:
        return _graph(text)

    @classmethod
    def parse(cls, text: str) -> CallGraph:
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            return cls((), {})
        defs = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
        callers: dict[str, set[str]] = {}
        for f in defs:
            for body in f.body:
                for node in ast.walk(body):
                    name = (
                        node.id
                        if isinstance(node, ast.Name)
                        else node.attr
                        if isinstance(node, ast.Attribute)
                        else None
                    )
                    if name is not None and name != f.name:
                        callers.setdefault(name, set()).add(f.name)
        funcs = tuple((f.name, f.lineno, f.end_lineno or f.lineno) for f in defs)
        return cls(funcs, {k: frozenset(v) for k, v in callers.items()})

    def chain(self, line: int) -> list[str]:
        """The function holding ``line``, then the functions that reach it (name references,
        breadth first); [] when the line is in no function."""
        holding = [f for f in self.funcs if f[1] <= line <= f[2]]
        if not holding:
            return []
        chain = [min(holding, key=lambda f: f[2] - f[1])[0]]
        for name in chain:
            for caller in sorted(self.callers.get(name, ())):
                if caller not in chain:
                    chain.append(caller)
            if len(chain) >= CHAIN_LIMIT:
                break
        return chain[:CHAIN_LIMIT]


@functools.lru_cache(maxsize=8)
def _graph(text: str) -> CallGraph:
    """One parse per library text: every diagnosis of a Triton kernel reads standard.py."""
    return CallGraph.parse(text)


def callers_of(text: str, line: int) -> list[str]:
    """The function holding ``line`` in a Python file's text, then the functions of that file
    that reach it; [] when the text does not parse or the line is in no function."""
    return CallGraph.of(text).chain(line)


def call_named(text: str, names: list[str]) -> str | None:
    """The call on a line of code to the first of ``names`` it makes, as written
    (``tl.max`` for ``max``); None when it calls none."""
    for name in names:
        found = re.search(rf"(?<![\w.])((?:\w+\.)*{re.escape(name)})\s*\(", text)
        if found:
            return found.group(1)
    return None


@dataclass(frozen=True)
class Site:
    """Where a library instruction's samples are counted."""

    at: Where  # the user's line
    detail: str  # the library line, and the call that reached it where named


class CallSites:
    """Maps each library line of one kernel to the user's line that called it.

    ``located``: every SASS address of the kernel with its (file, line); ``text``: a line's
    source text (None when the report lacks it); ``file_text``: a file's whole text."""

    def __init__(
        self,
        located: dict[int, Where],
        text: Callable[[str, int], str | None],
        file_text: Callable[[str], str | None],
    ) -> None:
        self.text, self.file_text = text, file_text
        own = sorted((pc, w) for pc, w in located.items() if not is_library(w[0]))
        self.pcs = [pc for pc, _ in own]
        self.lines = [w for _, w in own]
        self.by_line: dict[Where, list[int]] = {}
        for pc, w in own:
            self.by_line.setdefault(w, []).append(pc)
        # The lines of each of the user's files this kernel's code spans: a call site whose
        # own code the compiler folded away (``tl.sum`` inside an expression) is still there.
        self.spans: dict[str, tuple[int, int]] = {}
        for name, line in self.by_line:
            low, high = self.spans.get(name, (line, line))
            self.spans[name] = (min(low, line), max(high, line))
        self.graphs: dict[str, CallGraph] = {}
        self.sites: dict[tuple[str, ...], list[tuple[Where, str]]] = {}

    def __bool__(self) -> bool:
        return bool(self.pcs)

    def _chain(self, lib: Where) -> tuple[str, ...]:
        name, line = lib
        if name not in self.graphs:
            content = self.file_text(name) if name.endswith(".py") else None
            self.graphs[name] = CallGraph.of(content) if content else CallGraph((), {})
        return tuple(self.graphs[name].chain(line))

    def _named_sites(self, lib: Where) -> list[tuple[Where, str]]:
        """The user's lines that call a function reaching ``lib``, with the call's name."""
        chain = self._chain(lib)
        if chain not in self.sites:
            found: list[tuple[Where, str]] = []
            for name, (low, high) in self.spans.items() if chain else ():
                for line in range(low, high + 1):
                    code = self.text(name, line)
                    call = call_named(code, list(chain)) if code else None
                    if call is not None:
                        found.append(((name, line), call))
            self.sites[chain] = found
        return self.sites[chain]

    def _neighbours(self, pc: int) -> list[Where]:
        """The user's lines of the instructions just before and just after ``pc``."""
        i = bisect.bisect_left(self.pcs, pc)
        return [self.lines[j] for j in (i - 1, i) if 0 <= j < len(self.pcs)]

    def _rank(self, pc: int, at: Where, around: list[Where]) -> tuple[int, int, int]:
        """How well a call site fits a library instruction: between the user's lines around
        it in the SASS first, then nearest in the SASS, then nearest in the source."""
        same = [w[1] for w in around if w[0] == at[0]]
        inside = 0 if same and min(same) <= at[1] <= max(same) else 1
        pcs = self.by_line.get(at, [])
        i = bisect.bisect_left(pcs, pc)
        far = min((abs(pcs[j] - pc) for j in (i - 1, i) if 0 <= j < len(pcs)), default=1 << 62)
        apart = min((abs(line - at[1]) for line in same), default=1 << 30)
        return inside, far, apart

    def site(self, pc: int, lib: Where) -> Site:
        """The user's line a library instruction at ``pc`` is counted on."""
        where = f"{_basename(lib[0])}:{lib[1]}"
        around = self._neighbours(pc)
        named = self._named_sites(lib)
        if named:
            at, call = min(named, key=lambda s: (self._rank(pc, s[0], around), s[0]))
            return Site(at, f"{call} in {where}")
        i = bisect.bisect_left(self.pcs, pc)
        near = [j for j in (i - 1, i) if 0 <= j < len(self.pcs)]
        j = min(near, key=lambda k: (abs(self.pcs[k] - pc), -k))
        return Site(self.lines[j], f"{where} (nearest in the SASS)")


def attribute(
    values: dict[int, float], located: dict[int, Where], sites: CallSites
) -> tuple[dict[Where, float], dict[Where, dict[str, float]]]:
    """Values summed per line, a library line's on the user's line that called it; and per
    user line, the library code counted on it (detail -> value)."""
    by_line: dict[Where, float] = {}
    inlined: dict[Where, dict[str, float]] = {}
    for pc, value in values.items():
        where = located.get(pc)
        if where is None:
            continue
        if sites and is_library(where[0]):
            site = sites.site(pc, where)
            where = site.at
            detail = inlined.setdefault(where, {})
            detail[site.detail] = detail.get(site.detail, 0.0) + value
        by_line[where] = by_line.get(where, 0.0) + value
    return by_line, inlined


def hottest(details: dict[str, float] | None) -> str | None:
    """The library code that adds most to a line, or None."""
    if not details:
        return None
    return max(details.items(), key=lambda kv: (kv[1], kv[0]))[0]
