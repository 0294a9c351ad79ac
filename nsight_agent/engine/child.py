"""The program ncu runs for ``analyze.kernel``: import the user's function, run every
config ``runs`` times inside an NVTX call range, and write the manifest.

Run as ``python -m nsight_agent.engine.entry SPEC.pkl``. The user's module is imported,
not executed as ``__main__``, so code under ``if __name__ == "__main__":`` does not run here;
a profiled function called at import time stops the import (``ImportStop``) with everything
defined above that call in place.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import os
import pickle
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

CHILD_ENV = "NSIGHT_AGENT_CHILD"


class ImportStop(BaseException):
    """Raised by a profiled function called while its module is imported in the child.

    A BaseException so that a user's ``except Exception`` does not swallow it.
    """


def in_child() -> bool:
    return os.environ.get(CHILD_ENV) == "1"


@dataclass
class ChildSpec:
    """Everything the child needs, pickled by the parent."""

    module_name: str
    module_file: str | None
    qualname: str
    configs: list[tuple[Any, ...]]
    runs: int
    manifest_path: str
    progress_path: str
    error_path: str
    sys_path: list[str] = field(default_factory=list)
    thermal_mode: str = "auto"
    thermal_wait: int | None = None
    thermal_cont: int | None = None
    thermal_timeout: float | None = None


def load_module(spec: ChildSpec) -> ModuleType:
    if spec.module_name != "__main__":
        try:
            return importlib.import_module(spec.module_name)
        except ImportStop:
            return sys.modules[spec.module_name]
    if not spec.module_file:
        raise RuntimeError(
            "The profiled function was defined interactively (no source file). Define it in a "
            ".py file and run that file, so the profiler can import it in its own process."
        )
    name = "__nsight_agent_target__"
    mod_spec = importlib.util.spec_from_file_location(name, spec.module_file)
    if mod_spec is None or mod_spec.loader is None:
        raise RuntimeError(f"Cannot import {spec.module_file}")
    module = importlib.util.module_from_spec(mod_spec)
    sys.modules[name] = module
    with contextlib.suppress(ImportStop):
        mod_spec.loader.exec_module(module)
    return module


def resolve(module: ModuleType, qualname: str) -> Any:
    obj: Any = module
    for part in qualname.split("."):
        if not hasattr(obj, part):
            raise RuntimeError(
                f"{qualname} is not defined in {module.__name__} when it is imported. Keep the "
                "profiled function at module level and put the code that calls it under "
                '`if __name__ == "__main__":`.'
            )
        obj = getattr(obj, part)
    # The module-level name is our wrapper (analyze.kernel, maybe under analyze.plot);
    # each keeps what it wraps in ``func``: measure the user's function inside.
    while hasattr(obj, "func"):
        obj = obj.func
    return obj


def run(spec: ChildSpec) -> None:
    import nvtx

    from nsight_agent.annotation import CALL_DOMAIN, CALL_STATE
    from nsight_agent.engine.thermal import ThermalGuard, nvml_headroom_reader

    sys.path[:0] = [p for p in spec.sys_path if p not in sys.path]
    func = resolve(load_module(spec), spec.qualname)
    guard = ThermalGuard(
        spec.thermal_mode,  # type: ignore[arg-type]
        spec.thermal_wait,
        spec.thermal_cont,
        spec.thermal_timeout,
        read_headroom=nvml_headroom_reader(_cuda_pci_bus_id())
        if spec.thermal_mode != "off"
        else None,
    )
    calls: list[dict[str, Any]] = []
    total = len(spec.configs) * spec.runs
    with open(spec.progress_path, "a") as progress:
        for config_index, config in enumerate(spec.configs):
            for run_index in range(spec.runs):
                guard.before_call()
                CALL_STATE.reset()
                call = len(calls)
                rid = nvtx.start_range(f"call={call}", domain=CALL_DOMAIN)
                try:
                    func(*config)
                finally:
                    nvtx.end_range(rid)
                    calls.append(
                        {
                            "call": call,
                            "config": config_index,
                            "run": run_index,
                            "annotations": list(CALL_STATE.opened),
                            "failed": list(CALL_STATE.failed),
                        }
                    )
                    _write_manifest(spec, calls, guard)
                progress.write(f"{call + 1}/{total}\n")
                progress.flush()


def _write_manifest(spec: ChildSpec, calls: list[dict[str, Any]], guard: Any) -> None:
    manifest = {
        "calls": calls,
        "thermal": {"pauses": guard.pauses, "waited_s": round(guard.waited_s, 3)},
    }
    Path(spec.manifest_path).write_text(json.dumps(manifest))


def _cuda_pci_bus_id() -> str | None:
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available():
            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            return f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
    except Exception:
        return None
    return None


def main(argv: list[str]) -> int:
    with open(argv[1], "rb") as f:
        spec: ChildSpec = pickle.load(f)
    os.environ[CHILD_ENV] = "1"
    try:
        run(spec)
    except Exception:
        Path(spec.error_path).write_text(traceback.format_exc())
        return 3
    return 0
