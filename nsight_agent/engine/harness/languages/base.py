"""What a language adds to running a user's source, behind one interface: ``Adapter``.

The loader (``harness/sources.py``) drives every adapter the same way, for the harness
program and the warm timing worker alike:

1. ``environment(device)``, a class method, before any user code is imported (Triton's
   interpreter on a CPU must be switched on before ``triton`` is imported);
2. the user's modules imported, then the adapter made over them (``Sources``);
3. ``setup()``: the function that builds a config's inputs;
4. ``prepare()``: what is built before any entry runs (a CUDA extension), with notes for
   the run and whether the entries run at all on this device;
5. ``entry(fn, variant)`` for each variant: the callable that is measured.

The defaults are plain Python entries measured as they are (eager PyTorch).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, ClassVar

from nsight_agent.engine.harness import runtime
from nsight_agent.engine.harness.spec import Spec, VariantSpec


@dataclass
class Sources:
    """The user's imported modules of one run, by module name, and where it runs."""

    spec: Spec
    modules: dict[str, ModuleType]
    device: str

    @property
    def main(self) -> ModuleType:
        """The main module: it defines setup and what the variants share."""
        return self.modules[self.spec["setup_module"]]


@dataclass
class Prepared:
    """What ``Adapter.prepare`` made: notes for the run, the CUDA build's record, and
    whether the entries run here (a CUDA source without a GPU is only compiled)."""

    notes: list[str] = field(default_factory=list)
    cuda_build: dict[str, Any] | None = None
    run_entries: bool = True


class Adapter:
    """One language's part of a run (module docstring); a subclass overrides what differs."""

    title: ClassVar[str] = "Python"  # how messages name the language
    gpu_only: ClassVar[bool] = False  # entries run only on a GPU (elsewhere: compiled only)

    @classmethod
    def environment(cls, device: str) -> None:
        """Set up the process before any user code is imported; nothing by default."""

    def __init__(self, sources: Sources) -> None:
        self.sources = sources
        self.spec = sources.spec

    def setup(self) -> Callable[..., Any]:
        """The inputs of a config: the main module's setup function."""
        return runtime.function_of(self.sources.main, self.spec["setup"], "setup")

    def prepare(self) -> Prepared:
        """What must exist before any entry runs; nothing by default."""
        return Prepared()

    def entry(self, fn: Callable[..., Any], variant: VariantSpec) -> Callable[..., Any]:
        """The callable measured for ``variant``, from its source's ``fn``: ``fn`` itself."""
        return fn
