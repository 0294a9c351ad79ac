"""Triton: kernels launched from the entry points, measured as they are. On a CPU-only
machine they run in Triton's interpreter, which must be switched on before ``triton`` is
imported."""

from __future__ import annotations

import os
from typing import ClassVar

from nsight_agent.engine.harness.languages.base import Adapter


def interpret_on_cpu(device: str) -> None:
    """Triton's interpreter on a CPU (Triton kernels then run on CPU tensors)."""
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")


class TritonAdapter(Adapter):
    title: ClassVar[str] = "Triton"

    @classmethod
    def environment(cls, device: str) -> None:
        interpret_on_cpu(device)
