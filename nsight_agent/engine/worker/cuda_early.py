"""CUDA brought up in a thread while the profiled child imports the user's modules.

Under ncu, a process's first CUDA call loads ncu's injection and sets it up; importing torch
(seconds) touches no CUDA at all. So the child starts the driver beside its imports instead of
after them (on an H100, docs/GPU_RUNS.md: nsight-python's example 02 profiled in 4.1-4.2 s
against 5.2-6.7 s without it; on example 07 no difference was shown).
``ENV``:

- ``init`` (the default): the driver only (``cuInit``);
- ``context``: also the first visible device's primary context, the one torch's runtime then
  uses as it is (measured no faster than ``init``, and it would hold memory on a device the
  function may not use);
- ``off``.
"""

from __future__ import annotations

import ctypes
import os
import threading

ENV = "NSIGHT_AGENT_CHILD_CUDA_EARLY"
MODES = ("init", "context", "off")


def start() -> threading.Thread | None:
    mode = os.environ.get(ENV, MODES[0])
    if mode not in MODES or mode == "off":
        return None
    thread = threading.Thread(target=bring_up, args=(mode,), name="nsight-agent-cuda-early")
    thread.daemon = True  # never holds the child's exit: torch's own first call waits for it
    thread.start()
    return thread


def bring_up(mode: str, library: str = "libcuda.so.1") -> bool:
    """True when everything ``mode`` asks came up. Any failure is left for torch's own first
    CUDA call to report, in the user's terms."""
    try:
        cuda = ctypes.CDLL(library)
    except OSError:  # no NVIDIA driver here (a CPU machine, TRITON_INTERPRET)
        return False
    if cuda.cuInit(0) != 0:
        return False
    if mode != "context":
        return True
    device, context = ctypes.c_int(), ctypes.c_void_p()
    # Ordinal 0 of the visible devices: torch's "cuda" unless the function picks another.
    if cuda.cuDeviceGet(ctypes.byref(device), 0) != 0:
        return False
    return bool(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device) == 0)
