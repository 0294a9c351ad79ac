"""This machine as far as profiling is concerned, as data: its GPUs, the counter access,
ncu, the packages and what could not be told. The engine fills it (``engine/device.py``);
the views render it (``views/device.py``) without reaching the engine.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

Permission = Literal["yes", "no", "likely", "unlikely", "unknown"]


class GpuInfo(BaseModel):
    index: int
    name: str
    compute_capability: str | None = None
    sm_count: int | None = None
    memory_gib: float | None = None
    sm_clock_max_mhz: float | None = None
    memory_clock_max_mhz: float | None = None
    memory_bus_width_bits: int | None = None
    peak_dram_bytes_per_s: float | None = Field(
        default=None, description="2 x memory clock x bus width (NVML); ncu's peak is exact"
    )
    peak_fp32_flop_per_s: float | None = Field(
        default=None,
        description="SMs x FP32 lanes x 2 x max SM clock; tensor-core peaks come from ncu "
        "(roofline_metrics)",
    )
    clocks_locked: bool | None = Field(
        default=None, description="Application clocks pinned below the maximum (NVML)"
    )


class CounterAccess(BaseModel):
    permitted: Permission
    how: str = Field(description="How this was decided")
    hint: str | None = None


class DeviceInfo(BaseModel):
    """This machine, as far as profiling is concerned."""

    host: str
    python: str
    gpus: list[GpuInfo]
    driver_version: str | None = None
    cuda_version: str | None = Field(default=None, description="CUDA of the torch build")
    ncu_path: str | None = None
    ncu_version: str | None = None
    ncu_attach: str | None = Field(default=None, description="In-process attach (ncu 2026.2.1+)")
    counters: CounterAccess
    packages: dict[str, str] = Field(description="Installed versions, or 'not installed'")
    unknown: list[str] = Field(description="What could not be determined here, and why")
    can_profile: bool = Field(description="A GPU and ncu are present (counters permitting)")
    pool: dict[str, Any] | None = Field(
        default=None, description="Where jobs run: slots or nodes, GPUs, jobs running/queued"
    )
    ncu_cost: dict[str, Any] | None = Field(
        default=None,
        description="One ncu run here: start_s + kernels x passes x pass_s (what budget_s uses)",
    )
