"""One adapter per language (``base.Adapter``), one module each, found by the request's
``language`` here: a new language is a module beside these and one line in ``ADAPTERS``.

Runs where the user's code runs (the harness program, the warm timing worker), through the
one loader both call (``harness/sources.py``).
"""

from __future__ import annotations

from nsight_agent.engine.harness.languages.base import Adapter
from nsight_agent.engine.harness.languages.cuda import CudaAdapter
from nsight_agent.engine.harness.languages.kernelbench import KernelBenchAdapter
from nsight_agent.engine.harness.languages.torch import TorchAdapter
from nsight_agent.engine.harness.languages.torch_compile import TorchCompileAdapter
from nsight_agent.engine.harness.languages.triton import TritonAdapter

ADAPTERS: dict[str, type[Adapter]] = {
    "triton": TritonAdapter,
    "torch": TorchAdapter,
    "torch_compile": TorchCompileAdapter,
    "cuda": CudaAdapter,
    "kernelbench": KernelBenchAdapter,
}


def adapter_for(language: str) -> type[Adapter]:
    """The adapter of ``language``; a name without one is a ValueError that lists them."""
    try:
        return ADAPTERS[language]
    except KeyError:
        raise ValueError(
            f"no adapter for language {language!r}; languages: {', '.join(ADAPTERS)}"
        ) from None
