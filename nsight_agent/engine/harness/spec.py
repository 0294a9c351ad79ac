"""The harness's SPEC: what ``render`` writes into a run folder's ``harness.py`` and what the
measuring program (``program.py``) and the warm timing worker read back from it.

Plain data only (dicts, lists, str, numbers, bools, None), written as a Python literal, so
it is read back with ``ast.literal_eval``: the timing worker learns a run's request without
running anything of the harness.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, TypedDict, cast


class VariantSpec(TypedDict):
    """One variant: its name, its entry's name, and the module (file) that defines it."""

    name: str
    entry: str
    module: str
    file: str


class CudaSpec(TypedDict):
    """language="cuda": the CUDA source and the functions it exposes (None / empty: the
    main module's ``CUDA_SOURCE`` / ``CUDA_FUNCTIONS``), and where builds are cached."""

    source: str | None
    functions: list[str]
    cache_dir: str


class Spec(TypedDict):
    language: str
    setup_module: str  # the main module: setup, and the sources' shared code
    setup: str
    variants: list[VariantSpec]
    baseline: str
    configs: list[dict[str, Any]]
    runs: int
    warmup: int
    seed: int
    torch_ranges: bool
    sample_launches: bool
    vary_inputs: bool
    rtol: float | None
    atol: float | None
    trials: int  # correctness="kernelbench": its seeded trials per config (0: none)
    # The pre-flight's timed calls on a GPU (harness/call_loop.py): per-call runs per config,
    # KernelBench's perf trials per variant and config (0: none), the L2 flushed before each
    call_runs: int
    perf_trials: int
    flush_l2: bool
    tolerances: dict[str, tuple[float, float]] | None  # (rtol, atol) by dtype name
    compile_options: dict[str, Any]
    cuda: CudaSpec


def read_spec(harness: Path) -> Spec:
    """The SPEC of a rendered ``harness.py``, read from its text (nothing of it runs)."""
    tree = ast.parse(harness.read_text(), str(harness))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "SPEC" for t in node.targets
        ):
            return cast(Spec, ast.literal_eval(node.value))
    raise ValueError(f"{harness} assigns no SPEC")
