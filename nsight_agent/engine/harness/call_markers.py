"""Call markers: how the kernels of an attached ncu run are tied to the harness's calls.

ncu 2025.3.1 records no NVTX state in attach mode (docs/ARCHITECTURE.md, "Pre-launched
targets"), and NVTX is how a cold run's report says which call launched a kernel. So a harness
run by a pre-launched target launches an empty kernel of its own before and after each
measured call, whose grid says which call it brackets: ``(call + 1, BEGIN or END, 1)``. The
grid is in every report (``launch__grid_dim_*``, always collected), and ncu profiles kernels
in launch order, so the extraction (``collection/call_markers.py``) reads the kernels between
a call's two markers as that call's and drops the markers.

Each bracket also sits inside a profiler range (cudaProfilerStart/Stop): the attach runs with
``--profile-from-start off`` (``collection/ncu.attach_argv``), so ncu profiles the measured
calls and their markers only, never the set-up, correctness and warm-up kernels between them
(which, with sections, would each cost as many replays as a measured kernel).

Off unless the target sets ``NSIGHT_AGENT_CALL_MARKERS=1`` for its job: a cold run and the
pre-flight (which counts each call's kernels with CUPTI) launch none.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

MARKER_KERNEL = "nsight_agent_call_marker"
BEGIN, END = 1, 2
ENV = "NSIGHT_AGENT_CALL_MARKERS"
MAX_CALLS = 2**31 - 2  # a grid's x dimension holds call + 1


def on() -> bool:
    return os.environ.get(ENV) == "1"


@functools.cache
def _kernel() -> Any:
    """The marker kernel, compiled on first use (Triton's cache keeps it between targets).
    Defined here, not at import: Triton asks torch for the device when it compiles, a CUDA
    call that a target must not make before its job (ncu suspends it there)."""
    import triton

    @triton.jit
    def nsight_agent_call_marker():  # type: ignore[no-untyped-def]  # its name is the marker
        pass

    return nsight_agent_call_marker


def launch(call: int, tag: int) -> None:
    """One marker on the current stream: grid (call + 1, tag, 1), no work."""
    if not 0 <= call <= MAX_CALLS or tag not in (BEGIN, END):
        raise ValueError(f"no marker for call {call}, tag {tag}")
    _kernel()[(call + 1, tag, 1)]()


def profiler(start: bool) -> None:
    """cudaProfilerStart (``start``) or cudaProfilerStop on this process's CUDA context."""
    import torch

    (torch.cuda.profiler.start if start else torch.cuda.profiler.stop)()  # type: ignore[no-untyped-call]


@contextmanager
def around(
    call: int,
    device: str,
    launcher: Callable[[int, int], None] = launch,
    scope: Callable[[bool], None] = profiler,
) -> Iterator[None]:
    """Bracket one measured call with its two markers, inside a profiler range, when markers
    are on and the run is on a GPU. The END marker is launched and the range closed after a
    call that raised too (the run stays readable), but a launch that fails then (a context
    the call broke) does not hide the call's error; a BEGIN that fails closes the range."""
    if not (on() and device.startswith("cuda")):
        yield
        return
    scope(True)
    try:
        launcher(call, BEGIN)
    except BaseException:  # no call ran: close the range, launch no END
        with contextlib.suppress(Exception):
            scope(False)
        raise
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            launcher(call, END)
        with contextlib.suppress(Exception):
            scope(False)
        raise
    launcher(call, END)
    scope(False)
