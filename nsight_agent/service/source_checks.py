"""The sources of a request, checked as text: each compiles (the shared one and every
variant's own), the language they are written in, and the names the contract or KernelBench
needs bound at module level. Nothing is imported or run.

A problem in a candidate's own source (not the baseline's, not the shared one) names that
variant (``Problem.variant``): the validation stage drops that candidate alone.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import nsight_agent.kernelbench as kernelbench
import nsight_agent.source_shape as shape
from nsight_agent.errors import Problem

SYNTAX_HINT = "Fix that line of the source; nothing runs until every source compiles."
CONTRACT_HINT = (
    "The kernel contract: setup(**config, device) builds the inputs and each variant's entry "
    "(default run) is a module-level function of its source (docs/KERNEL_CONTRACT.md)."
)
KERNELBENCH_HINT = (
    "A KernelBench problem defines class Model, get_inputs() and get_init_inputs(); a "
    "candidate's own source defines class ModelNew."
)


@dataclass(frozen=True)
class VariantText:
    """One variant as sent: its name, its entry (None: the language's default) and the text
    of the module it lives in, with ``own`` when that is its own source."""

    name: str
    entry: str | None
    own: bool
    text: str


def variants_of(fields: Mapping[str, Any]) -> list[VariantText] | None:
    """The variants a request measures, as sent (dicts or ``Variant`` models); None when
    they are not readable as such (the request's own check then says why)."""
    main = fields.get("source")
    raw = fields.get("variants") or []
    if not isinstance(main, str) or not isinstance(raw, list):
        return None
    out = []
    for item in raw:
        data = item.model_dump(exclude_unset=True) if hasattr(item, "model_dump") else item
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            return None
        source, entry = data.get("source"), data.get("entry")
        own = isinstance(source, str) and source != main
        text = source if isinstance(source, str) and own else main
        out.append(VariantText(data["name"], entry if isinstance(entry, str) else None, own, text))
    return out


class SourceChecks:
    """The checks of one request's sources; ``files`` names the file each came from (variant
    name, or "" for the shared source), so a message names what the caller wrote."""

    def __init__(self, files: Mapping[str, str] | None) -> None:
        self.files = dict(files or {})
        self.problems: list[Problem] = []
        # (text, whose file) -> tree, None where it did not compile: each file told once
        self.trees: dict[tuple[str, str | None], ast.Module | None] = {}

    def where(self, variant: str | None) -> str:
        """``source`` / ``variant 'new' source``, or the file it came from."""
        file = self.files.get(variant or "")
        if variant is None:
            return file or "source"
        return f"{file} (variant {variant!r})" if file else f"variant {variant!r} source"

    def tree(self, text: str, variant: str | None, scoped: str | None) -> ast.Module | None:
        """The tree of ``text`` (read once); a source that does not compile is a problem,
        told once, in the name of ``variant``'s file (``scoped``: the candidate it drops)."""
        if (text, variant) in self.trees:
            return self.trees[text, variant]
        read = shape.read(text)
        if isinstance(read, shape.Unparsable):
            self.trees[text, variant] = None
            file = self.files.get(variant or "")
            not_python = file is not None and not file.endswith(".py")
            self.problems.append(
                Problem(
                    "not_python" if not_python else "syntax",
                    self.where(variant),
                    f"{'not Python source: ' if not_python else ''}syntax error: {read.message}",
                    line=read.line,
                    variant=scoped,
                    hint=SYNTAX_HINT,
                )
            )
            return None
        self.trees[text, variant] = read
        return read

    def require(
        self,
        tree: ast.Module,
        name: str,
        what: str,
        *,
        code: str,
        hint: str,
        file_of: str | None = None,
        scoped: str | None = None,
    ) -> None:
        """A problem ``code`` when ``tree`` binds no ``name`` at module level (``what`` says
        what it is); ``file_of``: the variant whose own source it is."""
        if not shape.binds(tree, name):
            where = self.where(file_of)
            self.problems.append(Problem(code, where, f"defines no {what}", None, scoped, hint))


def check_sources(
    fields: dict[str, Any], files: Mapping[str, str] | None = None
) -> tuple[list[Problem], str | None]:
    """Every problem of the sources in ``fields``, and the language they are checked as: the
    one given, else the one the shared source shows (``source_shape.detect_language``), else
    the default; None when that cannot be told (no language given and the shared source does
    not compile). Problems of a candidate's own source name it."""
    main = fields.get("source")
    variants = variants_of(fields)
    language = fields.get("language")
    if not isinstance(main, str) or variants is None:
        return [], language or "triton"
    checks = SourceChecks(files)
    main_tree = checks.tree(main, None, None)
    if language is None and main_tree is not None:
        cuda = fields.get("cuda_source")
        language = shape.detect_language(main, cuda if isinstance(cuda, str) else None)
        language = language or "triton"
    if not variants:  # the request's one variant: KernelBench's "ref", else named after entry
        given_entry = fields.get("entry")
        entry = given_entry if isinstance(given_entry, str) else "run"
        kb = language == "kernelbench"
        variants = [VariantText("ref" if kb else entry, None if kb else entry, False, main)]
    given = fields.get("baseline")
    baseline = given if isinstance(given, str) else variants[0].name
    if main_tree is not None and language is not None:
        _check_main(checks, main_tree, language, fields)
    for v in variants:
        scoped = v.name if v.own and v.name != baseline else None
        tree = checks.tree(v.text, v.name if v.own else None, scoped)
        if tree is None or language is None:  # None: the shared source would have told it
            continue
        if v.entry is not None and not v.entry.isidentifier():
            continue  # the request's own check refuses the name
        role = "the candidate" if v.own else "the model"
        if language == "kernelbench":
            entry = v.entry or (kernelbench.CANDIDATE_CLASS if v.own else kernelbench.PROBLEM_CLASS)
            what, hint = f"class {entry!r} ({role} of variant {v.name!r})", KERNELBENCH_HINT
        else:
            entry = v.entry or "run"
            what, hint = f"function {entry!r} (the entry of variant {v.name!r})", CONTRACT_HINT
        file_of = v.name if v.own else None
        checks.require(
            tree, entry, what, code="missing_entry", hint=hint, file_of=file_of, scoped=scoped
        )
    return checks.problems, language


def _check_main(
    checks: SourceChecks, tree: ast.Module, language: str, fields: dict[str, Any]
) -> None:
    """What the shared source must bind: KernelBench's problem, or the contract's setup (and
    for CUDA, its C++ source)."""
    if language == "kernelbench":
        model = kernelbench.PROBLEM_CLASS
        for name, what in ((model, f"class {model!r}"), ("get_inputs", "function 'get_inputs'")):
            what = f"{what} (a KernelBench problem defines it)"
            checks.require(tree, name, what, code="kernelbench_shape", hint=KERNELBENCH_HINT)
        needs = shape.init_parameters(tree, model)
        if needs and not shape.binds(tree, "get_init_inputs"):  # Model() alone would fail
            checks.problems.append(
                Problem(
                    "kernelbench_shape",
                    checks.where(None),
                    f"defines no function 'get_init_inputs', and {model}.__init__ needs "
                    f"{', '.join(needs)}",
                    hint=KERNELBENCH_HINT,
                )
            )
        return
    setup = fields.get("setup") or "setup"
    if isinstance(setup, str):
        what = f"function {setup!r} (setup(**config, device) builds the inputs)"
        checks.require(tree, setup, what, code="missing_setup", hint=CONTRACT_HINT)
    if language == "cuda" and not fields.get("cuda_source"):
        checks.require(
            tree,
            shape.CUDA_SOURCE,
            "CUDA_SOURCE: language 'cuda' needs its C++/CUDA source there, or in cuda_source",
            code="missing_cuda_source",
            hint="Put the CUDA C++ in a module-level CUDA_SOURCE string (and the functions to "
            "expose in CUDA_FUNCTIONS), or pass cuda_source and cuda_functions.",
        )
