"""What this machine can profile: GPU, driver, ncu, counter permission, peaks, packages.

Everything is read without running a kernel (NVML, torch, ``ncu --version``,
``/proc/driver/nvidia/params``) unless ``probe_counters`` asks for one tiny ncu run. What
cannot be known here is listed in ``unknown`` with the reason, never guessed silently.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from nsight_agent.device_facts import CounterAccess as CounterAccess
from nsight_agent.device_facts import DeviceInfo as DeviceInfo
from nsight_agent.device_facts import GpuInfo as GpuInfo
from nsight_agent.device_facts import Permission as Permission
from nsight_agent.engine import process
from nsight_agent.engine.collection import gpu_lock
from nsight_agent.engine.collection.ncu import find_ncu
from nsight_agent.engine.collection.ncu_log import BUSY, BUSY_HINT, PERMISSION_HINT
from nsight_agent.engine.pinning import nvml_text
from nsight_agent.errors import NcuNotFoundError, ProfilerBusyError
from nsight_agent.request import TIME_METRIC

NCU_VERSION_TIMEOUT_S = 30.0
PROBE_TIMEOUT_S = 120.0
PACKAGES = ("nsight-agent", "mcp", "ncu-report", "torch", "triton", "pandas", "nvidia-ml-py")
# FP32 lanes per SM by compute capability (CUDA C Programming Guide, arithmetic throughput).
FP32_LANES_PER_SM: dict[tuple[int, int], int] = {
    (7, 0): 64,
    (7, 5): 64,
    (8, 0): 64,
    (8, 6): 128,
    (8, 7): 128,
    (8, 9): 128,
    (9, 0): 128,
    (10, 0): 128,
    (12, 0): 128,
}


def package_versions() -> dict[str, str]:
    out: dict[str, str] = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def ncu_version(ncu: str) -> str | None:
    try:
        proc = process.run_capture([ncu, "--version"], timeout=NCU_VERSION_TIMEOUT_S)
    except (OSError, process.RunTimeout):
        return None
    match = re.search(r"Version\s+([0-9][0-9.]*)", proc.stdout)
    if match:
        return match.group(1)
    lines = proc.stdout.strip().splitlines()
    return lines[-1] if lines else None


# nsight-python 1.x profiles in its own process: ncu attaches to a running interpreter. Older
# ncu (2025.3.1 on the H200 here: a second attach fails) must start the profiled process.
ATTACH_SINCE = (2026, 2, 1)


def attach_note(version: str | None) -> str | None:
    """What this ncu means for the cost of an ncu call (None when no ncu is known).

    With attach, the design is to profile on the warm worker (no cold interpreter per call);
    that path is not built yet, because no ncu that has it was available to verify it on."""
    numbers = re.findall(r"\d+", version or "")
    if not numbers:
        return None
    found = tuple(int(n) for n in numbers[:3])
    if found >= ATTACH_SINCE:
        return (
            "ncu can attach in-process (2026.2.1+); nsight-agent does not use it yet: each ncu "
            "call still starts the profiled process (method='timing' runs on a warm worker)"
        )
    return (
        "no in-process attach before ncu 2026.2.1: each ncu call starts the profiled process "
        "cold (method='timing' runs on a warm worker)"
    )


def _nvml_gpus(unknown: list[str]) -> tuple[list[GpuInfo], str | None]:
    try:
        import pynvml
    except ImportError:
        unknown.append("GPUs via NVML: nvidia-ml-py is not installed")
        return [], None
    try:
        pynvml.nvmlInit()
    except Exception as err:  # NVMLError_LibraryNotFound / DriverNotLoaded on CPU machines
        unknown.append(f"GPUs via NVML: no NVIDIA driver here ({err})")
        return [], None
    try:
        driver = nvml_text(pynvml.nvmlSystemGetDriverVersion())
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            gpus.append(_nvml_gpu(pynvml, i, h))
        return gpus, driver
    finally:
        pynvml.nvmlShutdown()


def dram_peak(slot: str | None = None) -> float | None:
    """Peak DRAM bandwidth (B/s) of GPU ``slot`` (an index as CUDA_VISIBLE_DEVICES names it;
    otherwise the first GPU), from NVML; None where NVML cannot tell."""
    gpus, _ = _nvml_gpus([])
    if not gpus:
        return None
    index = int(slot) if slot and slot.isdigit() and int(slot) < len(gpus) else 0
    return gpus[index].peak_dram_bytes_per_s


def _try(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:  # a query this GPU or driver does not support
        return None


def _nvml_gpu(nv: Any, index: int, h: Any) -> GpuInfo:
    cc = _try(nv.nvmlDeviceGetCudaComputeCapability, h)
    mem = _try(nv.nvmlDeviceGetMemoryInfo, h)
    sm_max = _try(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM)
    mem_max = _try(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_MEM)
    bus = _try(nv.nvmlDeviceGetMemoryBusWidth, h)
    app_sm = _try(nv.nvmlDeviceGetApplicationsClock, h, nv.NVML_CLOCK_SM)
    sms = _try(nv.nvmlDeviceGetNumGpuCores, h)  # CUDA cores; SMs come from torch below
    gpu = GpuInfo(
        index=index,
        name=nvml_text(nv.nvmlDeviceGetName(h)),
        compute_capability=f"{cc[0]}.{cc[1]}" if cc else None,
        memory_gib=round(mem.total / 2**30, 1) if mem else None,
        sm_clock_max_mhz=float(sm_max) if sm_max else None,
        memory_clock_max_mhz=float(mem_max) if mem_max else None,
        memory_bus_width_bits=int(bus) if bus else None,
        clocks_locked=(app_sm < sm_max) if app_sm and sm_max else None,
    )
    if mem_max and bus:
        gpu.peak_dram_bytes_per_s = 2.0 * mem_max * 1e6 * bus / 8
    if cc and sms:
        lanes = FP32_LANES_PER_SM.get((cc[0], cc[1]))
        if lanes:
            gpu.sm_count = int(sms) // lanes
    return gpu


def _torch_fill(gpus: list[GpuInfo], unknown: list[str]) -> str | None:
    """SM counts (and GPUs NVML missed) from torch, when a CUDA build is installed."""
    if importlib.util.find_spec("torch") is None:
        unknown.append("CUDA version and SM count via torch: torch is not installed")
        return None
    import torch

    cuda = torch.version.cuda
    if not torch.cuda.is_available():
        build = "a CPU-only torch build" if cuda is None else "no CUDA device visible to torch"
        unknown.append(f"SM count and clocks via torch: {build}")
        return cuda
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        if i >= len(gpus):
            gpus.append(GpuInfo(index=i, name=props.name))
        g = gpus[i]
        g.sm_count = props.multi_processor_count
        g.compute_capability = g.compute_capability or f"{props.major}.{props.minor}"
        g.memory_gib = g.memory_gib or round(props.total_memory / 2**30, 1)
    return cuda


def _fp32_peaks(gpus: list[GpuInfo]) -> None:
    for g in gpus:
        if g.sm_count and g.sm_clock_max_mhz and g.compute_capability:
            major, minor = (int(x) for x in g.compute_capability.split("."))
            lanes = FP32_LANES_PER_SM.get((major, minor))
            if lanes:
                g.peak_fp32_flop_per_s = g.sm_count * lanes * 2.0 * g.sm_clock_max_mhz * 1e6


def counter_access_static() -> CounterAccess:
    """Counter permission from the driver's setting, without running ncu."""
    params = Path("/proc/driver/nvidia/params")
    root = hasattr(os, "geteuid") and os.geteuid() == 0
    if not params.exists():
        return CounterAccess(
            permitted="unknown", how="no NVIDIA driver parameters (/proc/driver/nvidia/params)"
        )
    match = re.search(r"RmProfilingAdminOnly:\s*(\d)", params.read_text(errors="replace"))
    if match is None:
        return CounterAccess(permitted="unknown", how="RmProfilingAdminOnly not in driver params")
    admin_only = match.group(1) == "1"
    if not admin_only:
        return CounterAccess(
            permitted="likely", how="driver allows all users (RmProfilingAdminOnly=0)"
        )
    if root:
        return CounterAccess(permitted="likely", how="admin-only profiling, running as root")
    return CounterAccess(
        permitted="unlikely",
        how="driver restricts counters to admins (RmProfilingAdminOnly=1), not root",
        hint=PERMISSION_HINT,
    )


_PROBE = "import torch; x = torch.ones(1024, device='cuda'); torch.cuda.synchronize(); (x * 2).sum().item()"


def probe_counters(ncu: str) -> CounterAccess:
    """One tiny profiled kernel: the only sure way to know ncu may read the counters."""
    with tempfile.TemporaryDirectory(prefix="nsight_agent_probe_") as tmp:
        log = Path(tmp) / "ncu.log"
        argv = [
            ncu,
            "--metrics",
            TIME_METRIC,
            "--launch-count",
            "1",
            "--log-file",
            str(log),
            "--export",
            str(Path(tmp) / "probe"),
            sys.executable,
            "-c",
            _PROBE,
        ]
        keys = gpu_lock.gpu_keys(os.environ.get("CUDA_VISIBLE_DEVICES"))
        try:
            with gpu_lock.held(keys, tag="device_info probe", timeout=PROBE_TIMEOUT_S):
                proc = process.run_capture(argv, timeout=PROBE_TIMEOUT_S)
        except process.RunTimeout:
            return CounterAccess(permitted="unknown", how=f"probe ran past {PROBE_TIMEOUT_S:.0f} s")
        except ProfilerBusyError as err:
            return CounterAccess(permitted="unknown", how=f"probe not run: {err.message}")
        text = (log.read_text(errors="replace") if log.exists() else "") + proc.stdout + proc.stderr
        if BUSY.search(text):
            return CounterAccess(
                permitted="unknown", how="probe: another profiler held the counters", hint=BUSY_HINT
            )
        if "ERR_NVGPUCTRPERM" in text:
            return CounterAccess(
                permitted="no", how="probe: ERR_NVGPUCTRPERM", hint=PERMISSION_HINT
            )
        if (Path(tmp) / "probe.ncu-rep").exists():
            return CounterAccess(permitted="yes", how="probe: one kernel profiled")
        tail = " ".join(text.strip().splitlines()[-3:])[:300]
        return CounterAccess(permitted="unknown", how=f"probe profiled nothing: {tail}")


def device_info(probe: bool = False) -> DeviceInfo:
    """Collect what this machine offers for profiling; ``probe`` runs one tiny ncu session."""
    unknown: list[str] = []
    gpus, driver = _nvml_gpus(unknown)
    cuda = _torch_fill(gpus, unknown)
    _fp32_peaks(gpus)
    ncu_path: str | None
    try:
        ncu_path = find_ncu()
    except NcuNotFoundError:
        ncu_path = None
        unknown.append("ncu version: ncu is not installed (or not on PATH / $NCU)")
    version = ncu_version(ncu_path) if ncu_path else None
    if gpus and ncu_path and probe:
        counters = probe_counters(ncu_path)
    else:
        counters = counter_access_static()
        if not gpus:
            counters.how += "; no GPU here, so no probe"
        elif ncu_path and counters.permitted != "no":
            counters.how += "; confirm with device_info(probe_counters=true)"
    if not gpus:
        unknown.append(
            "peak bandwidth and FLOP/s: no GPU here; reports carry the GPU's peaks "
            "(summarize_report / roofline_metrics on a .ncu-rep)"
        )
    return DeviceInfo(
        host=os.uname().nodename if hasattr(os, "uname") else "",
        python=sys.version.split()[0],
        gpus=gpus,
        driver_version=driver,
        cuda_version=cuda,
        ncu_path=ncu_path,
        ncu_version=version,
        ncu_attach=attach_note(version),
        counters=counters,
        packages=package_versions(),
        unknown=unknown,
        can_profile=bool(gpus and ncu_path and counters.permitted not in ("no",)),
    )
