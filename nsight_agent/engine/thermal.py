"""Thermal guard: pause between measured calls while the profiled GPU is near throttling.

Headroom is NVML's temperature margin (the "T.Limit" that nvidia-smi shows), or the slowdown
threshold minus the current temperature where the margin is not reported. The GPU is the one
the profiled process actually uses: CUDA device 0 of that process, matched by PCI bus id.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any, Literal

from nsight_agent.errors import CoolingTimeoutError

ThermalMode = Literal["auto", "manual", "off"]

DEFAULT_WAIT = 10  # pause when headroom falls to this many degrees C
DEFAULT_CONT = 20  # resume once headroom is back to this
DEFAULT_TIMEOUT = 180.0
# In auto mode the resume threshold adapts: few calls between pauses -> cool further.
AUTO_MIN_CONT, AUTO_MAX_CONT, AUTO_STEP = 12, 50, 3
AUTO_FEW_CALLS, AUTO_MANY_CALLS = 5, 50


def nvml_headroom_reader(pci_bus_id: str | None = None) -> Callable[[], int | None] | None:
    """A function returning the current headroom in degrees C, or None if NVML is unusable."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        if pci_bus_id:
            handle: Any = pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id)
        else:
            index = int((os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0] or 0)
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:
        return None

    def read() -> int | None:
        try:
            return int(pynvml.nvmlDeviceGetMarginTemperature(handle).margin)
        except Exception:
            pass
        try:
            temp = pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)
            slow = pynvml.nvmlDeviceGetTemperatureThreshold(
                handle, pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
            )
            return int(slow) - int(temp)
        except Exception:
            return None

    return read if read() is not None else None


class ThermalGuard:
    """Call ``before_call()`` ahead of each measured call; it sleeps while the GPU is hot."""

    def __init__(
        self,
        mode: ThermalMode = "auto",
        wait: int | None = None,
        cont: int | None = None,
        timeout: float | None = None,
        read_headroom: Callable[[], int | None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.mode = mode
        self.wait = DEFAULT_WAIT if wait is None else wait
        self.cont = DEFAULT_CONT if cont is None else cont
        self.timeout = DEFAULT_TIMEOUT if timeout is None else timeout
        if self.cont <= self.wait:
            raise ValueError(
                f"thermal_cont ({self.cont}) must be larger than thermal_wait ({self.wait}): "
                "profiling resumes only once the GPU has more headroom than when it paused."
            )
        self.read = read_headroom
        self.sleep = sleep
        self.clock = clock
        self.calls_since_resume = 0
        self.pauses = 0
        self.waited_s = 0.0

    def before_call(self) -> None:
        if self.mode == "off" or self.read is None:
            return
        headroom = self.read()
        if headroom is None:
            return
        self.calls_since_resume += 1
        if headroom > self.wait:
            return
        if self.mode == "auto":
            if self.calls_since_resume < AUTO_FEW_CALLS:
                self.cont = min(self.cont + AUTO_STEP, AUTO_MAX_CONT)
            elif self.calls_since_resume > AUTO_MANY_CALLS:
                self.cont = max(self.cont - AUTO_STEP, AUTO_MIN_CONT)
        self._cool_down(headroom)
        self.calls_since_resume = 0

    def _cool_down(self, headroom: int) -> None:
        self.pauses += 1
        start = self.clock()
        while headroom < self.cont:
            if self.clock() - start > self.timeout:
                if self.mode == "auto" and self.cont > max(AUTO_MIN_CONT, self.wait + 1):
                    self.cont = max(self.cont - AUTO_STEP, AUTO_MIN_CONT, self.wait + 1)
                    start = self.clock()
                    continue
                raise CoolingTimeoutError(
                    f"The GPU did not cool to {self.cont} C of headroom within {self.timeout:.0f} s "
                    f"(headroom now {headroom} C).",
                    "Raise thermal_timeout, lower thermal_cont, or use thermal_mode='off' on a "
                    "machine whose cooling you trust.",
                )
            self.sleep(0.5)
            value = self.read() if self.read else None
            if value is None:
                break
            headroom = value
        self.waited_s += self.clock() - start
