"""The user's sources of a run loaded, the one way both methods do it: the harness program
(``program.py``, for the ncu path and every pre-flight) and the warm timing worker
(``worker/timing_run.py``) each call ``load`` and measure what it returns.

In order: the language's environment (before any user code); a guard over the functions the
timer and the checker use (``integrity.Guard``); the torch extensions every source builds at
import, built at once (``ext_builds``); the main module, which must import (it defines setup
and what the variants share); each variant's own module, whose failure costs that variant
only (and every variant of that module); then the language's adapter over them
(``languages/``): setup, what is built before any entry, and each variant's entry.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nsight_agent.engine.harness import checks, integrity, runtime, verdicts
from nsight_agent.engine.harness.ext_builds import Builds
from nsight_agent.engine.harness.languages import adapter_for
from nsight_agent.engine.harness.languages.base import Adapter, Prepared, Sources
from nsight_agent.engine.harness.spec import Spec

# Beside integrity.GUARDED (torch's functions): ours that the checks and the timer call.
GUARDED_HERE = (
    (checks, "compare"),
    (checks, "check_single"),
    (verdicts, "judge"),
    (runtime, "call"),
)


@dataclass
class Loaded:
    """A run's sources, loaded: what each method measures."""

    adapter: Adapter
    setup: Callable[..., Any]
    entries: dict[str, Callable[..., Any]]  # by variant, those that loaded
    dropped: runtime.Dropped  # variants whose own source failed to load, each its own error
    guard: integrity.Guard  # made before any user code was imported
    replaced: list[str]  # guarded functions the sources replaced while they were imported
    builds: list[dict[str, Any]]  # the torch extensions the sources built at import
    prepared: Prepared  # notes, the CUDA build, whether the entries run here

    def import_note(self) -> str | None:
        """What the sources replaced while imported: every variant's numbers are suspect."""
        return integrity.replaced_note(self.replaced) if self.replaced else None


def module_names(spec: Spec) -> set[str]:
    """The names the user's modules take in ``sys.modules``."""
    return {spec["setup_module"], *(v["module"] for v in spec["variants"])}


def load(spec: Spec, folder: Path, device: str, skip: Collection[str] = ()) -> Loaded:
    """Load the sources of ``spec`` from ``folder`` for ``device``, leaving out the variants
    in ``skip``; the main module's failure raises ``SourceError`` (the run's), a variant's
    own is in ``Loaded.dropped``."""
    language = adapter_for(spec["language"])
    language.environment(device)
    guard = integrity.Guard(GUARDED_HERE)
    runtime.pin_synchronize()  # the harness's own waits never use a variant's replacement
    variants = [v for v in spec["variants"] if v["name"] not in skip]
    dropped = runtime.Dropped(spec["baseline"])
    main = spec["setup_module"]
    builds = Builds(spec["cuda"]["cache_dir"])
    files: list[tuple[str, str | Path]] = [(main, folder / f"{main}.py")]
    files += [(v["module"], folder / v["file"]) for v in variants]
    builds.prebuild(files)  # every source at once
    modules = {main: runtime.load_user_module(main, str(folder / f"{main}.py"), builds)}
    broken: dict[str, dict[str, Any]] = {}  # module -> the error of its first variant
    for v in variants:
        if v["module"] in modules or v["module"] in broken:
            continue
        with dropped.isolate(v["name"], "import"):
            path = str(folder / v["file"])
            modules[v["module"]] = runtime.load_user_module(v["module"], path, builds)
        if v["name"] in dropped:
            broken[v["module"]] = dropped[v["name"]]
    adapter = language(Sources(spec, modules, device))
    setup = adapter.setup()
    replaced = guard.replaced()  # replaced while the sources were imported: trust no one
    prepared = adapter.prepare()
    entries = {}
    for v in variants:
        if v["module"] in broken:
            dropped.drop(v["name"], "error", broken[v["module"]])
            continue
        with dropped.isolate(v["name"], "import"):
            fn = runtime.function_of(modules[v["module"]], v["entry"], "entry point")
            entries[v["name"]] = adapter.entry(fn, v)
    return Loaded(adapter, setup, entries, dropped, guard, replaced, builds.records, prepared)
