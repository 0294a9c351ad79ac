"""Eager PyTorch: setup and entries as they are; the warm-up creates cuBLAS/cuDNN handles and
loads lazy CUDA modules before the first measured call."""

from __future__ import annotations

from typing import ClassVar

from nsight_agent.engine.harness.languages.base import Adapter


class TorchAdapter(Adapter):
    title: ClassVar[str] = "PyTorch"
