"""This machine's GPU slots (``local_slots``), and which GPU the current job is pinned to:
a context variable the executor sets in the thread that runs a job, and the environment its
child processes must get.

    with pinned("1"):                      # LocalExecutor, around one job
        env = process.child_env()          # the hook below adds CUDA_VISIBLE_DEVICES=1

The hook (one line in ``process.child_env``, before the caller's ``extra``)::

    env.update(pinning.pinned_env())

With no pin (the CLI, a Ray worker whose ``CUDA_VISIBLE_DEVICES`` Ray already set) the
environment is left as it is. A pin is a device id as ``CUDA_VISIBLE_DEVICES`` spells it
(an index or a GPU UUID); "cpu" pins nothing.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib.util
import os
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

_DEVICE: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "nsight_agent_pinned_device", default=None
)


def current_device() -> str | None:
    """The device the current job is pinned to, or None."""
    return _DEVICE.get()


def pinned_env() -> dict[str, str]:
    """``{"CUDA_VISIBLE_DEVICES": <device>}`` inside a pinned job; empty otherwise."""
    device = _DEVICE.get()
    if device is None or device == "cpu":
        return {}
    return {"CUDA_VISIBLE_DEVICES": device}


@contextlib.contextmanager
def pinned(device: str | None) -> Iterator[None]:
    """Pin the jobs run in this block (this thread or task) to ``device``."""
    token = _DEVICE.set(device)
    try:
        yield
    finally:
        _DEVICE.reset(token)


def local_slots() -> list[str]:
    """This machine's GPUs as ``CUDA_VISIBLE_DEVICES`` entries; ["cpu"] when it has none.

    On a machine with a GPU (NVML's count, else torch's), an existing ``CUDA_VISIBLE_DEVICES``
    is the list (its entries, ids or UUIDs, are what a child must be given), else every GPU.
    Without one it is ["cpu"], whatever ``CUDA_VISIBLE_DEVICES`` says: set on a CPU-only
    machine (a CI image, Ray's logical GPUs), it made every job a CUDA job whose harness died.
    """
    count = _nvml_count()
    if count is None:
        count = _torch_count()
    if not count:
        return ["cpu"]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [d.strip() for d in visible.split(",") if d.strip()]
        return ids if ids and not ids[0].startswith("-") else ["cpu"]
    return [str(i) for i in range(count)]


def has_gpu() -> bool:
    """Whether this machine has a GPU at all (NVML, else torch), whatever
    ``CUDA_VISIBLE_DEVICES`` says: Ray sets it on machines whose GPUs are only logical."""
    count = _nvml_count()
    return bool(count if count is not None else _torch_count())


def _nvml_count() -> int | None:
    return nvml_query(lambda nv: int(nv.nvmlDeviceGetCount()))


def nvml_query(query: Callable[[Any], T], *, no_driver: T | None = None) -> T | None:
    """``query(pynvml)`` inside one NVML session. None when nvidia-ml-py is missing or the
    query fails; ``no_driver`` when no NVIDIA driver answers (a machine without a GPU)."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver, no GPU: NVMLError of several kinds
        return no_driver
    try:
        return query(pynvml)
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def nvml_text(value: Any) -> str:
    """An NVML string: bytes in older nvidia-ml-py releases, str in newer ones."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _torch_count() -> int:
    if importlib.util.find_spec("torch") is None:
        return 0
    try:
        import torch

        return int(torch.cuda.device_count())
    except Exception:
        return 0
