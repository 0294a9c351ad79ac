"""device_info and ``nsight-agent doctor`` as text: the machine's facts (``DeviceInfo``,
``nsight_agent/device_facts.py``), what to install for each missing piece, and the executor's
pool in rows (not a Python dict)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nsight_agent.device_facts import DeviceInfo

# package (as DeviceInfo.packages names it) -> what it is for, and the command that installs it
INSTALL: dict[str, tuple[str, str]] = {
    "torch": (
        "runs every kernel, in every language",
        "pip install torch  (CPU-only machine: pip install torch "
        "--index-url https://download.pytorch.org/whl/cpu)",
    ),
    "triton": ("language='triton' kernels", "pip install triton"),
    "ncu-report": ("reads .ncu-rep reports", "pip install ncu-report"),
    "mcp": ("the MCP server (nsight-agent serve)", "pip install 'mcp>=2.3'"),
    "pandas": ("result tables", "pip install pandas"),
    "nvidia-ml-py": ("GPU facts through NVML", "pip install nvidia-ml-py"),
    # No release is published: a user runs from a clone (PYTHONPATH) or installs it from one.
    "nsight-agent": (
        "running from a source tree",
        'pip install ".[kernels]" in a clone (no release is published yet)',
    ),
}
NCU_INSTALL = (
    "install Nsight Compute (with the CUDA toolkit, or from "
    "https://developer.nvidia.com/nsight-compute) and put ncu on PATH, or set $NCU"
)


def missing_packages(info: DeviceInfo) -> dict[str, tuple[str, str]]:
    """Each package that is not installed -> (what it is for, how to install it)."""
    out = {}
    for name, version in info.packages.items():
        if version == "not installed":
            out[name] = INSTALL.get(name, ("", f"pip install {name}"))
    return out


def install_lines(info: DeviceInfo) -> list[str]:
    """What to install, one line each: the missing packages, then ncu."""
    lines = [
        f"install {name} ({why}): {how}" if why else f"install {name}: {how}"
        for name, (why, how) in missing_packages(info).items()
    ]
    if info.ncu_path is None:
        lines.append(f"install ncu: {NCU_INSTALL}")
    return lines


def _value(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={_value(v)}" for k, v in value.items()) or "-"
    if isinstance(value, list):
        return ", ".join(_value(v) for v in value) or "-"
    return "-" if value is None else str(value)


def render_pool(pool: Mapping[str, Any]) -> str:
    """The executor's pool: one line of totals, then one line per slot, node or host."""
    scalars = {k: v for k, v in pool.items() if not isinstance(v, (list, dict))}
    executor = scalars.pop("executor", "local")
    head = ", ".join(f"{k.replace('_', ' ')} {_value(v)}" for k, v in scalars.items())
    lines = [f"pool ({executor}): {head}".rstrip(": ")]
    for key, value in pool.items():
        if isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, Mapping):
                    fields = ", ".join(
                        f"{k.replace('_', ' ')} {_value(v)}"
                        for k, v in item.items()
                        if v not in (None, {}, [])
                    )
                else:
                    fields = _value(item)
                lines.append(f"  {key.rstrip('s')} {i}: {fields}")
        elif isinstance(value, dict):
            lines.append(f"  {key.replace('_', ' ')}: {_value(value)}")
    return "\n".join(lines)


def render_facts(info: DeviceInfo) -> str:
    """The machine: host, GPUs, driver, ncu, counters, packages, what is unknown."""
    lines = [f"host {info.host}, Python {info.python}"]
    if info.gpus:
        for g in info.gpus:
            lines.append(
                f"GPU {g.index}: {g.name} (sm_{(g.compute_capability or '?').replace('.', '')}, "
                f"{g.sm_count or '?'} SMs, {g.memory_gib or '?'} GiB)"
            )
    else:
        lines.append("GPU: none found")
    lines.append(f"driver {info.driver_version or '-'}, CUDA (torch) {info.cuda_version or '-'}")
    lines.append(f"ncu: {info.ncu_path or 'not found'} {info.ncu_version or ''}".rstrip())
    if info.ncu_attach:
        lines.append(f"  {info.ncu_attach}")
    lines.append(f"counters permitted: {info.counters.permitted} ({info.counters.how})")
    if info.counters.hint:
        lines.append(f"  hint: {info.counters.hint}")
    pkgs = ", ".join(f"{k} {v}" for k, v in info.packages.items())
    lines.append(f"packages: {pkgs}")
    lines += [f"unknown: {u}" for u in info.unknown]
    lines.append(f"can profile: {'yes' if info.can_profile else 'no'}")
    return "\n".join(lines)


def render_device(info: DeviceInfo) -> str:
    """The machine's facts, what to install, and the pool when known."""
    lines = [render_facts(info), *install_lines(info)]
    if info.pool is not None:
        lines.append(render_pool(info.pool))
    cost = info.ncu_cost
    if cost:
        lines.append(
            f"one ncu run: {cost['start_s']:.1f} s + {cost['pass_s']:.3f} s per replay pass of "
            f"each kernel ({cost['basis']})"
        )
    return "\n".join(lines)
