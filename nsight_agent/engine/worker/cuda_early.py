"""CUDA brought up in a thread while the profiled child imports the user's modules.

Under ncu, a process's first CUDA call loads ncu's injection and sets it up; importing torch
(seconds) touches no CUDA at all. So the child starts the driver beside its imports instead of
after them (on an H100 nsight-python's example 02 profiles faster with it than without it).
``ENV``:

- ``init`` (the child's default): the driver only (``cuInit``);
- ``context``: also the first visible device's primary context, the one torch's runtime then
  uses as it is (measured no faster than ``init``);
- ``warmup`` (what ``analyze.kernel`` asks under kernel replay): the context, then one empty
  kernel (``annotation.WARMUP_KERNEL``) launched inside the range ncu profiles, so that ncu
  sets up its first profiled kernel during the imports rather than in the first measured call
  (on an H100 the measured calls take a fraction of their time without it; the extraction
  drops the kernel by name). Its range is opened through an NVTX domain object of its own:
  ncu 2025.3.1 stops matching a domain's ranges on one thread once the same domain handle has
  opened a range on another (the user's calls then profile nothing);
- ``off``.

Holding a context on the first visible device costs memory there even when the function uses
another one; set ``init`` or ``off`` for such a function.
"""

from __future__ import annotations

import ctypes
import os
import threading

ENV = "NSIGHT_AGENT_CHILD_CUDA_EARLY"
MODES = ("init", "context", "warmup", "off")
# The child waits this long for the warm-up before its first call, then goes on without it.
WARMUP_WAIT_S = 60.0

_started: list[threading.Thread] = []


def start() -> threading.Thread | None:
    mode = os.environ.get(ENV, MODES[0])
    if mode not in MODES or mode == "off":
        return None
    thread = threading.Thread(target=bring_up, args=(mode,), name="nsight-agent-cuda-early")
    thread.daemon = True  # never holds the child's exit: torch's own first call waits for it
    thread.start()
    _started.append(thread)
    return thread


def wait() -> None:
    """Before the first measured call: a warm-up kernel still in its range would put the
    call's kernels launched outside ``annotate`` inside the profiled range."""
    for thread in _started:
        thread.join(WARMUP_WAIT_S)


def bring_up(mode: str, library: str = "libcuda.so.1") -> bool:
    """True when everything ``mode`` asks came up. Any failure is left for torch's own first
    CUDA call to report, in the user's terms."""
    try:
        cuda = ctypes.CDLL(library)
    except OSError:  # no NVIDIA driver here (a CPU machine, TRITON_INTERPRET)
        return False
    if cuda.cuInit(0) != 0:
        return False
    if mode == "init":
        return True
    device, context = ctypes.c_int(), ctypes.c_void_p()
    # Ordinal 0 of the visible devices: torch's "cuda" unless the function picks another.
    if cuda.cuDeviceGet(ctypes.byref(device), 0) != 0:
        return False
    if cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device) != 0:
        return False
    return mode != "warmup" or warm_up(cuda, context)


# An empty kernel in PTX, which the driver compiles for whatever GPU it finds.
PTX = """.version 6.0
.target sm_50
.address_size 64
.visible .entry {name}()
{{
    ret;
}}
"""


def warm_up(cuda: ctypes.CDLL, context: ctypes.c_void_p) -> bool:
    """Launch the warm-up kernel on ``context`` inside the scope range ncu profiles."""
    import nvtx

    from nsight_agent.annotation import SCOPE_DOMAIN, SCOPE_RANGE, WARMUP_KERNEL

    module, function = ctypes.c_void_p(), ctypes.c_void_p()
    cuda.cuCtxSetCurrent.argtypes = [ctypes.c_void_p]
    cuda.cuModuleLoadData.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p]
    cuda.cuModuleGetFunction.argtypes = [
        ctypes.POINTER(ctypes.c_void_p),
        ctypes.c_void_p,
        ctypes.c_char_p,
    ]
    cuda.cuLaunchKernel.argtypes = [ctypes.c_void_p, *[ctypes.c_uint] * 7, *[ctypes.c_void_p] * 3]
    if cuda.cuCtxSetCurrent(context) != 0:
        return False
    ptx = PTX.format(name=WARMUP_KERNEL).encode()
    if cuda.cuModuleLoadData(ctypes.byref(module), ptx) != 0:
        return False
    if cuda.cuModuleGetFunction(ctypes.byref(function), module, WARMUP_KERNEL.encode()) != 0:
        return False
    # A new domain object, not nvtx.get_domain's cached one that annotate() uses: see above.
    domain = nvtx.Domain(SCOPE_DOMAIN)
    scope = domain.start_range(message=SCOPE_RANGE)
    try:
        launched = cuda.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, None, None, None) == 0
        return bool(launched and cuda.cuCtxSynchronize() == 0)
    finally:
        domain.end_range(scope)
