"""What a job on the warm worker changed of its process, put back after it.

A cold run (the ncu path's harness, a KernelBench script) starts in a fresh process; the warm
worker serves job after job in one. A source that sets ``torch.set_default_dtype(torch.float64)``,
``torch.set_num_threads(1)`` or TF32, replaces ``torch.softmax`` or sets an environment variable
would otherwise change every later job there: the next request's inputs in float64, its calls
on one thread, measured and checked unlike the same request on the ncu path. So torch's
process-wide settings, the functions user code replaced in torch's namespaces, the environment
and the interpreter's own state (``process_state.py``) go back when the job ends. A thread
user code left running would keep using the CPU or GPU while later jobs are timed, so the
worker is then retired (``leftover_threads``), as it is when a process the job started still
runs or a setting cannot be put back (a hard limit lowered). Settings that have no getter
(``torch.set_flush_denormal``) or that torch fixes once (interop threads) are not kept.
"""

from __future__ import annotations

import contextlib
import os
import sysconfig
import threading
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional

from nsight_agent.engine import children
from nsight_agent.engine.worker.process_state import (
    PROCESS_SETTINGS,
    Setting,
    leftover_processes,
    our_processes,
)

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
# Which kernels scaled_dot_product_attention may pick and which library a matmul or a solver
# goes to: a job that turns flash attention off would slow every later job's attention.
SDP = ("flash", "mem_efficient", "math", "cudnn")
SETTINGS += [
    (
        f"torch.backends.cuda.{kind}_sdp",
        getattr(torch.backends.cuda, f"{kind}_sdp_enabled"),
        getattr(torch.backends.cuda, f"enable_{kind}_sdp"),
    )
    for kind in SDP
    if hasattr(torch.backends.cuda, f"enable_{kind}_sdp")
]
SETTINGS += [  # each read without bringing CUDA up; called with a value, it sets it
    (
        f"torch.backends.cuda.{name}",
        getattr(torch.backends.cuda, name),
        getattr(torch.backends.cuda, name),
    )
    for name in ("preferred_blas_library", "preferred_linalg_library")
    if hasattr(torch.backends.cuda, name)
]


# Kept only where CUDA is up (reading them would bring it up): a job that made another GPU or
# a side stream current would have every later job run there.
CUDA_SETTINGS: list[Setting] = [
    ("current CUDA device", torch.cuda.current_device, torch.cuda.set_device),
    ("current CUDA stream", torch.cuda.current_stream, torch.cuda.set_stream),
]
if hasattr(torch.cuda, "get_per_process_memory_fraction"):  # a cap would fail later jobs
    CUDA_SETTINGS.append(
        (
            "CUDA memory fraction",
            torch.cuda.get_per_process_memory_fraction,
            torch.cuda.set_per_process_memory_fraction,
        )
    )


# Where a source may replace a function for the whole process (``torch.softmax = ...``,
# ``torch.Tensor.add = ...``): what user code replaced, or added to a class over an inherited
# method, goes back when its job ends. Only functions written in user code: libraries patch
# these too (importing torch._dynamo wraps torch.manual_seed and nn.Module.__init__), and
# torch keeps other state here (torch.cuda's generators) that a job may rightly change.
NAMESPACES: list[Any] = [
    torch,
    torch.nn.functional,
    torch.linalg,
    torch.fft,
    torch.special,
    torch.cuda,
    torch.Tensor,
    torch.nn.Module,
]


def _kept_settings() -> list[Setting]:
    cuda_up = torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
    return SETTINGS + (CUDA_SETTINGS if cuda_up else []) + PROCESS_SETTINGS


def read(settings: list[Setting] | None = None) -> dict[str, Any]:
    """Each setting's value now, by name; those that cannot be read here are left out."""
    now: dict[str, Any] = {}
    for name, get, _ in _kept_settings() if settings is None else settings:
        with contextlib.suppress(Exception):
            now[name] = get()
    return now


@contextlib.contextmanager
def kept() -> Iterator[list[str]]:
    """Run the body; then put back every setting it changed, in ``_kept_settings``' order,
    every function it replaced in ``NAMESPACES``, and the environment. Yields a list that then
    holds what the body left that would outlive it: the threads of user code still running
    (``leftover_threads``), the processes it started still running (``leftover_processes``)
    and the settings that could not be put back."""
    threads, settings = set(threading.enumerate()), _kept_settings()
    marker = os.environ.get(children.MARKER, "")
    processes = our_processes(marker)
    before, environment = read(settings), dict(os.environ)
    functions = [(space, dict(vars(space))) for space in NAMESPACES]
    outliving: list[str] = []
    try:
        yield outliving
    finally:
        for key in set(os.environ) - set(environment):
            os.environ.pop(key, None)
        os.environ.update({k: v for k, v in environment.items() if os.environ.get(k) != v})
        for name, get, put in settings:
            try:  # one that cannot be put back spoils no other
                if name in before and get() != before[name]:
                    put(before[name])
            except Exception as err:
                outliving.append(f"{name} not put back ({type(err).__name__}: {err})")
        for space, saved in functions:
            _put_back(space, saved)
        outliving += [f"thread {name}" for name in leftover_threads(threads)]
        outliving += leftover_processes(marker, processes)


def _put_back(space: Any, saved: dict[str, Any]) -> None:
    """``space`` as in ``saved`` where user code changed it: a function it replaced back, and
    on a class one it added (it hides what the class inherits) removed; what a library or
    torch itself changed or added (a submodule imported, a cache) stays."""
    for name, value in list(vars(space).items()):
        old = saved.get(name, _NONE)
        if old is value or not _users(value):
            continue
        with contextlib.suppress(Exception):
            if old is not _NONE:
                setattr(space, name, old)
            elif isinstance(space, type):
                delattr(space, name)


_NONE = object()
# Where installed code lives (the standard library, site-packages) and this package's own
# folder: a function defined elsewhere was written by the user.
_NOT_USERS = tuple(
    {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    | {str(Path(__file__).resolve().parents[2])}
)


def leftover_threads(before: set[threading.Thread]) -> list[str]:
    """The names of threads running user code that started since ``before`` and still run
    (torch's and libraries' own pools, which later jobs reuse, are not counted)."""
    return [
        t.name
        for t in threading.enumerate()
        if t not in before and t.is_alive() and _users(getattr(t, "_target", None) or t.run)
    ]


def _users(value: Any) -> bool:
    """Whether ``value`` is a function (or method) defined in user code."""
    if isinstance(value, types.ModuleType):
        return False
    target = getattr(value, "__func__", value)
    code = getattr(target, "__code__", None)
    file = getattr(code, "co_filename", "")
    return bool(file) and not str(Path(file).resolve()).startswith(_NOT_USERS)
