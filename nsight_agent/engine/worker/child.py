"""The program ncu runs for ``analyze.kernel``: load the shipped function, run every config
``runs`` times inside an NVTX call range, and write the manifest.

Run as ``python -m nsight_agent.engine.worker.entry SPEC.pkl``. The function arrives by value
(``engine.shipping``): the user's script, notebook or ``python -c`` line is not imported or
re-run here. Only where by value failed is its module imported by name (then code under
``if __name__ == "__main__":`` does not run, and a profiled function called at import time stops
the import with everything defined above that call in place).
"""

from __future__ import annotations

import inspect
import json
import os
import pickle
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from nsight_agent.engine.worker import cuda_early, info, shipping
from nsight_agent.engine.worker.shipping import WORKER_ENV as CHILD_ENV
from nsight_agent.engine.worker.shipping import ImportStop, in_worker

# Frames under engine/ are ours: tracebacks shown to the user start below them.
ENGINE_DIR = str(Path(__file__).resolve().parents[1])


def in_child() -> bool:
    return in_worker()


@dataclass
class ChildSpec:
    """Everything the child needs; ``target`` is a ``shipping.ship`` payload (the function
    with its configs), the rest plain values."""

    target: bytes
    runs: int
    manifest_path: str
    progress_path: str
    error_path: str
    thermal_mode: str = "auto"
    thermal_wait: int | None = None
    thermal_cont: int | None = None
    thermal_timeout: float | None = None
    collectors: bytes | None = None  # information collectors, (name, callback, scope) tuples
    info_path: str | None = None  # where their values go (engine/worker/info.py)


def caller(func: Callable[..., Any]) -> Callable[[tuple[Any, ...]], Any]:
    """Call ``func`` with one config: positional parameters by position, keyword-only ones by
    name (a config lists the parameters in signature order, ``*args``/``**kwargs`` left out)."""
    try:
        params = [
            p
            for p in inspect.signature(func).parameters.values()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
    except (TypeError, ValueError):  # a builtin without a signature
        return lambda config: func(*config)
    keyword_only = [p.name for p in params if p.kind is p.KEYWORD_ONLY]
    n_positional = len(params) - len(keyword_only)

    def call(config: tuple[Any, ...]) -> Any:
        kwargs = dict(zip(keyword_only, config[n_positional:]))
        return func(*config[:n_positional], **kwargs)

    return call


def run(spec: ChildSpec, entered: float | None = None) -> None:
    import nvtx

    from nsight_agent.annotation import CALL_DOMAIN, CALL_STATE
    from nsight_agent.engine.thermal import ThermalGuard, nvml_headroom_reader

    shipped = shipping.unship(spec.target)
    call_one = caller(shipping.unwrap(shipped.func))
    configs = shipped.configs or [tuple(shipped.args)]
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
    total = len(configs) * spec.runs
    collectors = info.Collectors.load(spec.collectors)
    # The warm-up kernel's range closed before any of the function's own CUDA work.
    cuda_early.wait()
    collectors.once()
    # Wall-clock stamps for the caller's stage split (api/analyze.py): entered, function loaded
    # (its modules imported), each call's end.
    times = {"entered": entered, "loaded": time.time(), "calls_done": None}
    with open(spec.progress_path, "a") as progress:
        for config_index, config in enumerate(configs):
            collectors.start_config(config)
            for run_index in range(spec.runs):
                guard.before_call()
                CALL_STATE.reset()
                collectors.start_run()
                call = len(calls)
                returned = None
                rid = nvtx.start_range(f"call={call}", domain=CALL_DOMAIN)
                try:
                    returned = call_one(config)
                except Exception as err:
                    where = (
                        f"in {shipped.origin}, config #{config_index} {config!r}, run {run_index}"
                    )
                    if hasattr(err, "add_note"):  # Python >= 3.11
                        err.add_note(where)
                    raise
                finally:
                    nvtx.end_range(rid)
                    calls.append(
                        {
                            "call": call,
                            "config": config_index,
                            "run": run_index,
                            "annotations": list(CALL_STATE.opened),
                            "failed": list(CALL_STATE.failed),
                            "returned": returned is not None,
                        }
                    )
                    collectors.end_call(call)
                    collectors.write(spec.info_path)
                    times["calls_done"] = time.time()
                    _write_manifest(spec, calls, guard, times)
                progress.write(f"{call + 1}/{total}\n")
                progress.flush()


def _write_manifest(
    spec: ChildSpec, calls: list[dict[str, Any]], guard: Any, times: dict[str, float | None]
) -> None:
    manifest = {
        "calls": calls,
        "thermal": {"pauses": guard.pauses, "waited_s": round(guard.waited_s, 3)},
        "times": times,
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


def user_traceback(err: BaseException) -> str:
    """The traceback from the user's code on: the runner's own leading frames are dropped, the
    user's file and line (or notebook cell, whose text came with the payload) stay."""
    tb: TracebackType | None = err.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(ENGINE_DIR):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(err), err, tb or err.__traceback__))


def main(argv: list[str], entered: float | None = None) -> int:
    with open(argv[1], "rb") as f:
        spec: ChildSpec = pickle.load(f)
    os.environ[CHILD_ENV] = "1"
    try:
        run(spec, entered)
    except ImportStop:
        Path(spec.error_path).write_text(
            "A profiled function was called inside the function being profiled; profile them "
            "one at a time (call the inner function's undecorated version)."
        )
        return 3
    except Exception as err:
        Path(spec.error_path).write_text(user_traceback(err))
        return 3
    return 0
