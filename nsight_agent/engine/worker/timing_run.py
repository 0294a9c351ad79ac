"""Timing a rendered run folder on the warm worker: its SPEC and the user's files loaded
(each variant's failure its own), the timer's and checker's functions guarded before user code
is imported, then ``timing.time_variants``."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from nsight_agent.engine.harness import checks, ext_builds, integrity, kernelbench, runtime
from nsight_agent.engine.store.records import Suspect, dropped_from
from nsight_agent.engine.worker import timing
from nsight_agent.engine.worker.timing import TimingOptions, TimingResult
from nsight_agent.errors import InvalidRequestError


def time_run_dir(run_dir: Path, device: str, options: TimingOptions | None = None) -> TimingResult:
    """Time the variants of a rendered run (harness.py's SPEC and the user's files) on
    ``device`` ("cuda" or "cpu"), with the request's seed, tolerances and vary_inputs (the
    SPEC's, over those of ``options``); in this process."""
    import importlib.util

    spec_module = importlib.util.spec_from_file_location(
        "nsight_agent_spec", run_dir / "harness.py"
    )
    if spec_module is None or spec_module.loader is None:
        raise InvalidRequestError(f"no harness.py in {run_dir}")
    harness = importlib.util.module_from_spec(spec_module)
    spec_module.loader.exec_module(harness)
    spec: dict[str, Any] = harness.SPEC
    opts = replace(
        options or TimingOptions(),
        seed=spec["seed"],
        rtol=spec["rtol"],
        atol=spec["atol"],
        vary_inputs=bool(spec.get("vary_inputs", True)),
        tolerances=spec.get("tolerances"),
    )
    variants = [v for v in spec["variants"] if v["name"] not in opts.skip]
    names = {v["module"] for v in variants} | {spec["setup_module"]}
    # What the timer and the checks rely on, as it was before user code is imported.
    runtime.pin_synchronize()
    timing.GUARD[:] = [
        integrity.Guard([(checks, "compare"), (checks, "check_single"), (runtime, "call")])
    ]
    dropped = runtime.Dropped(spec["baseline"])
    try:
        main = spec["setup_module"]
        builds = ext_builds.Builds(spec["cuda"]["cache_dir"])
        files = [(v["module"], run_dir / v["file"]) for v in variants]
        builds.prebuild([(main, run_dir / f"{main}.py"), *files])  # every candidate at once
        modules = {main: runtime.load_user_module(main, str(run_dir / f"{main}.py"), builds)}
        for v in variants:
            with dropped.isolate(v["name"], "import"):
                if v["module"] not in modules:
                    modules[v["module"]] = runtime.load_user_module(
                        v["module"], str(run_dir / v["file"]), builds
                    )
        adapter = None
        if spec["language"] == "kernelbench":
            adapter = kernelbench.Adapter(modules[main], modules.values(), spec["seed"])
            setup = adapter.setup
        else:
            setup = runtime.function_of(modules[main], spec["setup"], "setup")
        entries = {}
        for v in variants:
            if v["module"] in modules and v["name"] not in dropped:
                with dropped.isolate(v["name"], "import"):
                    entries[v["name"]] = _entry(spec, v, modules, device, adapter)
        at_import = timing.GUARD[0].replaced()  # replaced while the sources were imported
        result = timing.time_variants(
            setup, entries, spec["configs"], baseline=spec["baseline"], device=device, options=opts
        )
        if spec.get("trials"):
            _add_trials(result, setup, entries, spec, device)
        if at_import:
            note = integrity.replaced_note(at_import)
            result.notes.append(f"the source {note}")
            result.suspects = [
                Suspect(variant=name, config_index=ci, reason=note)
                for name in entries
                for ci in range(len(spec["configs"]))
            ]
        result.dropped = {**dropped_from(dropped), **result.dropped}
        return result
    finally:
        timing.GUARD.clear()
        for name in names:
            sys.modules.pop(name, None)


def _entry(
    spec: dict[str, Any],
    v: dict[str, Any],
    modules: dict[str, Any],
    device: str,
    adapter: kernelbench.Adapter | None,
) -> Callable[..., Any]:
    fn = runtime.function_of(modules[v["module"]], v["entry"], "entry point")
    if adapter is not None:
        return adapter.entry(fn)
    if spec["language"] == "torch_compile":
        import torch

        with runtime.stage("compile", v["name"]):
            return torch.compile(fn, **spec["compile_options"])
    if spec["language"] == "cuda":
        if not device.startswith("cuda"):
            raise InvalidRequestError("CUDA sources can be timed only on a GPU.")
        main = modules[spec["setup_module"]]
        source = spec["cuda"]["source"] or getattr(main, "CUDA_SOURCE", "")
        functions = spec["cuda"]["functions"] or list(getattr(main, "CUDA_FUNCTIONS", []))
        ext, _ = _cuda_ext(source, tuple(functions), spec["cuda"]["cache_dir"])
        return functools.partial(fn, ext)
    return fn


def _add_trials(
    result: TimingResult,
    setup: Callable[..., Any],
    entries: dict[str, Callable[..., Any]],
    spec: dict[str, Any],
    device: str,
) -> None:
    """correctness="kernelbench": its seeded trials per config, after the timing loop; a
    failing trial replaces that (variant, config)'s check if it passed, and its row is wrong."""
    for ci, config in enumerate(spec["configs"]):
        at = {(c["variant"], c["config_index"]): i for i, c in enumerate(result.checks)}
        judged = {
            n: e
            for n, e in entries.items()
            if n not in result.dropped and (n, ci) in at and result.checks[at[n, ci]]["ok"]
        }
        found = kernelbench.trials(
            setup,
            judged,
            config,
            baseline=spec["baseline"],
            device=device,
            seed=spec["seed"],
            table=spec["tolerances"],
            config_index=ci,
            after_call=functools.partial(_blame_replacement, result, ci),
        )
        for check in found:
            i = at[check["variant"], ci]  # rows and checks are appended together
            result.checks[i], result.rows[i]["OutputOK"] = check, False


def _blame_replacement(result: TimingResult, config_index: int, name: str) -> None:
    """After a trial's call: a guarded function it replaced is put back and ``name`` is
    suspect (the timing loop's own calls are checked the same way)."""
    note = timing.replaced_now()
    if note:
        result.suspects.append(Suspect(variant=name, config_index=config_index, reason=note))


@functools.lru_cache(maxsize=32)
def _cuda_ext(source: str, functions: tuple[str, ...], cache_dir: str) -> tuple[Any, Any]:
    """Built extensions stay loaded in the warm worker: one build (or load) per source."""
    from nsight_agent.engine.harness import cuda_build

    return cuda_build.build(source, list(functions), Path(cache_dir))
