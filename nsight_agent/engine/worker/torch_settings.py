"""torch's process-wide settings, as they were before a job on the warm worker, put back after it.

A cold run (the ncu path's harness, a KernelBench script) starts in a fresh process with
torch's defaults; the warm worker serves job after job in one process. A source that sets
``torch.set_default_dtype(torch.float64)``, ``torch.set_num_threads(1)`` or TF32 at import
would otherwise change every later job there: the next request's inputs in float64, its
calls on one thread, its matmuls in TF32, measured and checked unlike the same request
on the ncu path. Settings that have no getter (``torch.set_flush_denormal``) or that torch
fixes once (interop threads) are not kept.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

Setting = tuple[str, Callable[[], Any], Callable[[Any], None]]
MATMUL, CUDNN = "torch.backends.cuda.matmul", "torch.backends.cudnn"


def _backend(where: str, owner: Any, name: str) -> Setting:
    def put(value: Any) -> None:
        setattr(owner, name, value)

    return f"{where}.{name}", lambda: getattr(owner, name), put


def _grad(value: bool) -> None:
    torch.set_grad_enabled(value)


def _deterministic(value: tuple[bool, bool]) -> None:
    torch.use_deterministic_algorithms(value[0], warn_only=value[1])


# In this order when put back: the float32 matmul precision also sets the TF32 flags that
# follow it, which then take their own values.
SETTINGS: list[Setting] = [
    ("default dtype", torch.get_default_dtype, torch.set_default_dtype),
    ("intra-op threads", torch.get_num_threads, torch.set_num_threads),
    ("grad mode", torch.is_grad_enabled, _grad),
    ("anomaly detection", torch.is_anomaly_enabled, torch.set_anomaly_enabled),
    (
        "deterministic algorithms",
        lambda: (
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
        ),
        _deterministic,
    ),
    (
        "float32 matmul precision",
        torch.get_float32_matmul_precision,
        torch.set_float32_matmul_precision,
    ),
    _backend(MATMUL, torch.backends.cuda.matmul, "allow_tf32"),
    _backend(MATMUL, torch.backends.cuda.matmul, "allow_fp16_reduced_precision_reduction"),
    _backend(MATMUL, torch.backends.cuda.matmul, "allow_bf16_reduced_precision_reduction"),
    _backend(CUDNN, torch.backends.cudnn, "allow_tf32"),
    _backend(CUDNN, torch.backends.cudnn, "benchmark"),
    _backend(CUDNN, torch.backends.cudnn, "deterministic"),
    _backend(CUDNN, torch.backends.cudnn, "enabled"),
]
if hasattr(torch, "get_default_device"):  # torch >= 2.3
    SETTINGS.append(("default device", torch.get_default_device, torch.set_default_device))


def read() -> dict[str, Any]:
    """Each setting's value now, by name."""
    return {name: get() for name, get, _ in SETTINGS}


@contextlib.contextmanager
def kept() -> Iterator[None]:
    """Run the body; then put back every setting it changed, in ``SETTINGS``' order."""
    before = read()
    try:
        yield
    finally:
        for name, get, put in SETTINGS:
            with contextlib.suppress(Exception):  # one that cannot be put back spoils no other
                if get() != before[name]:
                    put(before[name])
