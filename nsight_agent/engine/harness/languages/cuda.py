"""CUDA C++: the source (the request's ``cuda_source``, or ``CUDA_SOURCE`` in the main
module) built once per hash of (source, functions, flags) under the cache folder with
``load_inline`` (``harness/cuda_build.py``) and passed to every entry as its first argument.
Without a GPU it is only compiled (``nvcc --ptx``), so compiler errors still surface with
their line, and the entries do not run.

A warm worker keeps what it built loaded: a later run of the same source in that process
(its timing job after its pre-flight) takes the loaded extension, and its build record says
so (a cache hit of 0 s)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

from nsight_agent.engine.harness import cuda_build, runtime
from nsight_agent.engine.harness.errors import SourceError
from nsight_agent.engine.harness.languages.base import Adapter, Prepared
from nsight_agent.engine.harness.spec import VariantSpec

NOT_RUN = "no GPU: the CUDA source was compiled, not run"
LOADED_LIMIT = 32  # extensions a warm worker keeps loaded
_LOADED: dict[tuple[str, tuple[str, ...], str], tuple[ModuleType, cuda_build.BuildInfo]] = {}


def built(
    source: str, functions: tuple[str, ...], cache: Path
) -> tuple[ModuleType, cuda_build.BuildInfo]:
    """The extension of ``source``, built (or loaded from the cache folder) once per process."""
    key = (source, functions, str(cache))
    if key in _LOADED:
        ext, info = _LOADED[key]
        return ext, replace(info, seconds=0.0, cache_hit=True, ahead=False)
    ext, info = cuda_build.build(source, list(functions), cache)
    if len(_LOADED) >= LOADED_LIMIT:
        _LOADED.pop(next(iter(_LOADED)))
    _LOADED[key] = (ext, info)
    return ext, info


class CudaAdapter(Adapter):
    title: ClassVar[str] = "CUDA"
    gpu_only: ClassVar[bool] = True
    ext: ModuleType | None = None

    def prepare(self) -> Prepared:
        main, cuda = self.sources.main, self.spec["cuda"]
        source = cuda["source"] or getattr(main, "CUDA_SOURCE", None)
        functions = tuple(cuda["functions"] or getattr(main, "CUDA_FUNCTIONS", []))
        cache = Path(cuda["cache_dir"])
        with runtime.stage("compile"):
            if not isinstance(source, str) or not source.strip():
                raise ValueError("no CUDA source: set cuda_source, or CUDA_SOURCE in the module")
            try:
                if not self.sources.device.startswith("cuda"):
                    info = cuda_build.check_compile(source, list(functions), cache)
                    return Prepared([NOT_RUN], info.to_dict(), run_entries=False)
                self.ext, info = built(source, functions, cache)
            except cuda_build.CompileError as err:
                raise SourceError(
                    "compile",
                    err.message,
                    line=err.line,
                    file="cuda_source",
                    traceback=err.log[-8000:],
                ) from None
        return Prepared(cuda_build=info.to_dict())

    def entry(self, fn: Callable[..., Any], variant: VariantSpec) -> Callable[..., Any]:
        """``fn(ext, *inputs)``: the entry gets the extension first."""
        return functools.partial(fn, self.ext)
