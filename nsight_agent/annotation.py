"""``annotate``: mark the code whose kernels are measured, as NVTX start/end ranges.

Start/end ranges (not push/pop) are process-wide, so kernels launched from other threads
inside the range are attributed to it. Each annotation opens two ranges: one named by the
user in ``NVTX_DOMAIN`` (what reports show) and a fixed one in ``SCOPE_DOMAIN`` that ncu
filters on, because ncu 2025.3 matches start/end ranges only by exact name (no wildcard).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

import nvtx

NVTX_DOMAIN = "nsight_agent"
SCOPE_DOMAIN = "nsight_agent.scope"
SCOPE_RANGE = "measure"
CALL_DOMAIN = "nsight_agent.call"
NCU_NVTX_INCLUDE = f"{SCOPE_DOMAIN}@{SCOPE_RANGE}"
# An empty kernel the profiled child may launch inside the scope range while it imports, so
# that ncu sets up its first profiled kernel then (engine/worker/cuda_early.py); no row and no
# view reads it (collection/extract.py drops it by this name).
WARMUP_KERNEL = "nsight_agent_warmup"

F = TypeVar("F", bound=Callable[..., Any])


class _CallState:
    """Which annotations one call of a profiled function opened; reset by the runner."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active: str | None = None
        self.used: set[str] = set()
        self.failed: list[str] = []
        self.opened: list[str] = []

    def reset(self) -> None:
        with self.lock:
            self.active = None
            self.used = set()
            self.failed = []
            self.opened = []


CALL_STATE = _CallState()

# Called with the name of each annotation as it opens, before its NVTX ranges start; set only
# in the profiled process, by the runner of information collectors (engine/worker/info.py).
_ENTER_HOOK: list[Callable[[str], None] | None] = [None]


def set_enter_hook(hook: Callable[[str], None] | None) -> None:
    """Install (or, with None, remove) the process-wide hook run as each annotation opens."""
    _ENTER_HOOK[0] = hook


class annotate:
    """Context manager and decorator marking a range whose kernels are profiled.

    ``ignore_failures=True`` swallows an exception raised inside the range; its
    measurements are then reported as NaN instead of stopping the whole sweep.
    """

    def __init__(self, name: str, ignore_failures: bool = False) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ValueError("annotate() needs a non-empty string name")
        self.name = name
        self.ignore_failures = ignore_failures
        self._ids: list[tuple[int, int]] = []

    def __enter__(self) -> annotate:
        with CALL_STATE.lock:
            if CALL_STATE.active is not None:
                raise ValueError(
                    f"Nested annotations are not supported. Cannot enter annotation {self.name!r} "
                    f"while another annotation is active. annotate({CALL_STATE.active!r}) is "
                    "open: close it first, or merge the two."
                )
            if self.name in CALL_STATE.used:
                raise ValueError(
                    f"Annotation name {self.name!r} has already been used in this profiling run. "
                    "Each annotation must have a unique name. A name may appear once per run of "
                    "the profiled function: give each range its own name."
                )
            CALL_STATE.active = self.name
            CALL_STATE.used.add(self.name)
            CALL_STATE.opened.append(self.name)
        hook = _ENTER_HOOK[0]
        if hook is not None:  # annotation-scope information collectors, outside the range
            hook(self.name)
        self._ids = [
            nvtx.start_range(self.name, domain=NVTX_DOMAIN),
            nvtx.start_range(SCOPE_RANGE, domain=SCOPE_DOMAIN),
        ]
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        # Kernels are asynchronous: wait for them before the range closes so that
        # timing tools see them inside it, as ncu does (ncu serialises launches).
        _synchronize_device()
        for rid in reversed(self._ids):
            nvtx.end_range(rid)
        self._ids = []
        with CALL_STATE.lock:
            CALL_STATE.active = None
            if exc_type is not None and self.ignore_failures:
                CALL_STATE.failed.append(self.name)
        return exc_type is not None and self.ignore_failures and issubclass(exc_type, Exception)

    def __call__(self, func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with annotate(self.name, self.ignore_failures):
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


def _synchronize_device() -> None:
    """Synchronise the current CUDA device if torch is loaded and CUDA is up; else no-op."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        return
    try:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
    except Exception:  # a failed sync is reported by the next CUDA call, not here
        return
