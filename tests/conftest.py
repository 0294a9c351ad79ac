"""Shared test set-up: `gpu` tests run only where a CUDA GPU and ncu are present."""

from __future__ import annotations

import os
import shutil

import pytest


def gpu_available() -> tuple[bool, str]:
    if shutil.which("ncu") is None and not os.environ.get("NCU"):
        return False, "ncu is not installed"
    try:
        import torch
    except ImportError:
        return False, "torch is not installed"
    if not torch.cuda.is_available():
        return False, "no CUDA GPU"
    return True, ""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    ok, why = gpu_available()
    if ok:
        return
    skip = pytest.mark.skip(reason=f"gpu test: {why}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
