"""A user source's own torch extension builds (``load_inline`` / ``load`` at import) in a
folder keyed by the source's hash, under our own lock, for the present GPU only.

torch's default folder is named by the extension's ``name=``, so two candidates that both call
theirs "fast_matmul" rebuild one folder in turn; and a build killed mid-way leaves torch's
``lock`` file behind, on which every later build waits forever. Here a source's imports build
in ``<cache>/ext-<sha256(source)[:16]>`` (the pre-flight, the warm worker, the ncu run and
later calls all find the library there), while an exclusive ``flock`` on a sibling file is
held: the kernel drops it when its holder dies, and whoever holds it knows that a torch
``lock`` left in the folder belongs to a dead build and removes it. Each extension is named
``<name>_<hash>`` (see ``own_names``), so one process can load two candidates' "fast_matmul".
A ``load_inline`` called later than at import (inside the entry) is not redirected.
When several sources of one call build, ``Builds.prebuild`` builds them at once, one child
process each, before they are imported in turn (the answer says "N sources at once"); one
the executor built before the job queued (``ahead_record``) is found built and said so, or
its compiler errors raised without compiling again. The C++ file of a ``load_inline`` may
read torch's header precompiled (``host_pch``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nsight_agent.engine.harness import ahead_record, host_pch, nvcc_split

# How long an import waits for another process's build of the same folder.
LOCK_WAIT_S = float(os.environ.get("NSIGHT_AGENT_BUILD_WAIT_S", "900"))
MARKER = "built.json"  # written after a source's import built or loaded its libraries


class BuildLockTimeout(TimeoutError):
    """Another process held the build folder's lock past the time limit."""


def builds_extensions(source: str) -> bool:
    """Whether a Python source may build a torch extension when imported."""
    return "cpp_extension" in source or "load_inline" in source


# CUDA code in a build: load_inline's cuda_sources, a .cu file given to load, a CUDAExtension.
_CUDA_BUILD = re.compile(r"cuda_sources\s*=|\.cu['\"]|CUDAExtension")


def cuda_build_impossible(source: str) -> str | None:
    """Why a source's CUDA extension cannot be built and run on this machine (no GPU, no
    CUDA toolkit), said before any compiler runs; None when it can, or builds no CUDA."""
    if not builds_extensions(source) or not _CUDA_BUILD.search(source):
        return None
    import torch

    missing = []
    if not torch.cuda.is_available():
        cpu_build = " (torch here is a CPU build)" if torch.version.cuda is None else ""
        missing.append(f"no NVIDIA GPU{cpu_build}")
    from torch.utils import cpp_extension  # its CUDA_HOME is what the build would use

    if cpp_extension.CUDA_HOME is None:
        missing.append("no CUDA toolkit that torch can find (set CUDA_HOME to its folder)")
    if not missing:
        return None
    return (
        f"it builds a CUDA extension (torch.utils.cpp_extension), and this machine has "
        f"{' and '.join(missing)}: run it on a machine with an NVIDIA GPU and the CUDA toolkit"
    )


def folder_for(cache_root: Path, source: str) -> Path:
    return cache_root / f"ext-{hashlib.sha256(source.encode()).hexdigest()[:16]}"


@contextlib.contextmanager
def build_lock(folder: Path, timeout: float = LOCK_WAIT_S) -> Iterator[list[str]]:
    """Hold ``<folder>.lock`` exclusively; yield the stale torch ``lock`` files removed."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder.with_name(folder.name + ".lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
                    raise BuildLockTimeout(
                        f"waited {timeout:g} s for the extension build in {folder} (process "
                        f"{holder} builds it); set NSIGHT_AGENT_BUILD_WAIT_S to wait longer"
                    ) from None
                time.sleep(0.2)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        # Every live builder of this folder takes our lock first: a torch baton here is stale.
        stale = [p for p in (folder / "lock", *folder.glob("*/lock")) if p.is_file()]
        for p in stale:
            p.unlink(missing_ok=True)
        yield [str(p.relative_to(folder)) for p in stale]
    finally:
        os.close(fd)  # drops the flock


@contextlib.contextmanager
def env_set(values: dict[str, str]) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def arch_env() -> dict[str, str]:
    """TORCH_CUDA_ARCH_LIST for the present GPU only (e.g. "9.0" on an H200), unless the
    user set it or there is no GPU."""
    if os.environ.get("TORCH_CUDA_ARCH_LIST"):
        return {}
    import torch

    if not torch.cuda.is_available():
        return {}
    major, minor = torch.cuda.get_device_capability()
    return {"TORCH_CUDA_ARCH_LIST": f"{major}.{minor}"}


def compiler_env() -> dict[str, str]:
    """The environment of a build: ``arch_env``, and nvcc's host and device passes at once
    (``nvcc_split``, through torch's ``PYTORCH_NVCC``) unless the user named an nvcc."""
    env = arch_env()
    if os.environ.get("PYTORCH_NVCC"):
        return env
    from torch.utils import cpp_extension

    if cpp_extension.CUDA_HOME:
        split = nvcc_split.command(os.path.join(cpp_extension.CUDA_HOME, "bin", "nvcc"))
        if split is not None:
            env["PYTORCH_NVCC"] = split
    return env


@contextlib.contextmanager
def own_names(tag: str) -> Iterator[None]:
    """While inside, ``load_inline`` and ``load`` name each extension ``<name>_<tag>``.

    One process (the warm worker) loads the candidates of every call: pybind11 hands back the
    module first loaded under a name, and torch rebuilds a name whose code changed as
    name_v1, name_v2, ... in turn; a name of the source's own keeps them apart."""
    import inspect

    from torch.utils import cpp_extension

    saved = {f: getattr(cpp_extension, f) for f in ("load_inline", "load")}

    def renamed(fn: Any) -> Any:
        signature = inspect.signature(fn)

        def build(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            bound.arguments["name"] = f"{bound.arguments['name']}_{tag}"
            # load_inline's C++ file starts with torch's header: gcc may read it precompiled
            header = host_pch.use(bound.arguments) if fn is saved["load_inline"] else None
            built = fn(*bound.args, **bound.kwargs)
            if header is not None:
                where = bound.arguments.get("build_directory") or os.path.join(
                    os.environ.get("TORCH_EXTENSIONS_DIR", ""), bound.arguments["name"]
                )
                with contextlib.suppress(Exception):  # the header is a saving, never a failure
                    host_pch.want(header, Path(where))
            return built

        return build

    for f, fn in saved.items():
        setattr(cpp_extension, f, renamed(fn))
    try:
        yield
    finally:
        for f, fn in saved.items():
            setattr(cpp_extension, f, fn)


def libraries(folder: Path) -> dict[str, int]:
    """The built extension libraries in ``folder`` (one subfolder per name=) and their mtimes."""
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.glob("*/*.so")}


@dataclass
class SourceBuild:
    """What importing one source built: recorded in the manifest beside ``cuda_build``."""

    module: str
    folder: str
    seconds: float = 0.0  # the whole import: compile, load and any wait for the lock
    cache_hit: bool = True  # no library was built or relinked by this import
    compiled: list[str] = field(default_factory=list)
    libraries: list[str] = field(default_factory=list)
    stale_locks: list[str] = field(default_factory=list)  # torch batons of dead builds removed
    arch: str | None = None
    parallel: int | None = None  # built in a child beside this many sources' (Builds.prebuild)
    wall: float | None = None  # the wall time of those builds together
    ahead: bool = False  # built before the job queued for a GPU (``ahead_record``)
    waited: float | None = None  # ahead: seconds it waited for a build slot of the machine

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@contextlib.contextmanager
def source_builds(
    cache_root: Path, source: str, module: str, timeout: float = LOCK_WAIT_S
) -> Iterator[SourceBuild]:
    """Around the import of ``source``: its extension builds go to its own folder."""
    folder = folder_for(cache_root, source)
    start = time.monotonic()
    record = SourceBuild(module, str(folder))
    env = compiler_env()
    record.arch = env.get("TORCH_CUDA_ARCH_LIST") or os.environ.get("TORCH_CUDA_ARCH_LIST")
    with build_lock(folder, timeout) as stale, own_names(folder.name.removeprefix("ext-")[:12]):
        before = libraries(folder)
        with env_set({"TORCH_EXTENSIONS_DIR": str(folder), **env}):
            yield record
        after = libraries(folder)
        record.stale_locks = stale
        record.compiled = sorted(k for k, t in after.items() if before.get(k) != t)
        record.cache_hit = not record.compiled
        record.libraries = sorted(after)
        record.seconds = time.monotonic() - start
        if after:
            (folder / MARKER).write_text(json.dumps(record.to_dict(), indent=1))


# Imports one source in a child process, so that its extensions build into its folder.
_CHILD = (
    "import sys; from pathlib import Path; from nsight_agent.engine.harness import ext_builds, "
    "runtime; runtime.load_user_module(sys.argv[2], sys.argv[3], ext_builds.Builds(sys.argv[1]))"
)
PARALLEL_ENV = "NSIGHT_AGENT_PARALLEL_BUILDS"  # "0": build one source after another


class Builds:
    """The builds of one process's user imports (``runtime.load_user_module``), in order."""

    def __init__(self, cache_root: str | Path | None) -> None:
        self.root = Path(cache_root) if cache_root else None
        self.records: list[dict[str, Any]] = []
        self.prebuilt: dict[str, dict[str, Any]] = {}  # folder -> what a child built there
        self.failed: dict[str, str] = {}  # folder -> its child's compiler errors

    def prebuild(self, sources: list[tuple[str, str | Path]]) -> None:
        """Build the extensions of several sources at once, one child process per source that
        imports it (its builds go to its own folder, under its lock), at most one per core,
        before this process imports them one by one and loads what was built. A source
        already built, or alone, is left to its import. A child whose build failed is not
        built again: the import of that source raises its compiler errors (an error row)."""
        if self.root is None or os.environ.get(PARALLEL_ENV) == "0":
            return
        todo: dict[str, tuple[str, Path]] = {}
        for module, path in sources:
            text = Path(path).read_text(errors="replace")
            folder = folder_for(self.root, text)
            # A CUDA build this machine cannot make is left to its import, which says why.
            built = (folder / MARKER).is_file() or ahead_record.read(folder) is not None
            if builds_extensions(text) and not built and cuda_build_impossible(text) is None:
                todo.setdefault(str(folder), (module, Path(path)))
        if len(todo) < 2:
            return
        jobs, started = min(len(todo), os.cpu_count() or 1), time.time()
        waiting = list(todo)
        running: dict[str, tuple[subprocess.Popen[bytes], float]] = {}  # folder -> child, start
        ends: dict[str, float] = {}
        while waiting or running:
            while waiting and len(running) < jobs:
                key = waiting.pop(0)
                module, path = todo[key]
                Path(key).parent.mkdir(parents=True, exist_ok=True)
                with open(f"{key}.log", "wb") as log:  # the child's output: its compile errors
                    argv = [sys.executable, "-c", _CHILD, str(self.root), module, str(path)]
                    # stdin closed: the child imports user code, and a server's stdin is its
                    # MCP channel
                    child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
                    running[key] = (child, time.time())
            for key, (child, start) in list(running.items()):
                if child.poll() is None and time.time() - start < LOCK_WAIT_S:
                    continue
                if child.poll() is None:  # past the wait a build may take: its import decides
                    child.kill()
                    child.wait()
                del running[key]
                ends[key] = time.time() - start
                if child.returncode and child.returncode > 0:
                    log_text = Path(f"{key}.log").read_text(errors="replace")
                    self.failed[key] = compile_message(log_text)
            time.sleep(0.05)
        wall = time.time() - started
        for key, (module, _) in todo.items():
            marker = Path(key) / MARKER
            if marker.is_file() and marker.stat().st_mtime >= started:
                record = json.loads(marker.read_text())
                self.prebuilt[key] = {
                    **record,
                    "module": module,
                    "parallel": len(todo),
                    "seconds": round(ends.get(key, wall), 3),
                    "wall": round(wall, 3),
                }

    @contextlib.contextmanager
    def around(self, module: str, path: Path) -> Iterator[None]:
        source = path.read_text(errors="replace")
        if self.root is None or not builds_extensions(source):
            yield
            return
        impossible = cuda_build_impossible(source)
        if impossible is not None:
            raise RuntimeError(f"the torch extension cannot be built here: {impossible}")
        ahead = ahead_record.read(folder_for(self.root, source))  # built before the GPU's turn
        failed = self.failed.get(str(folder_for(self.root, source))) or ahead_record.failure(ahead)
        if failed is not None:  # its child's build failed: not compiled a second time
            raise RuntimeError(f"the torch extension did not compile: {failed}")
        with source_builds(self.root, source, module) as record:
            try:
                yield
            except RuntimeError as err:
                if BUILD_ERROR not in str(err):
                    raise
                raise RuntimeError(
                    f"the torch extension did not compile: {compile_message(str(err))}"
                ) from None
        built = self.prebuilt.get(record.folder)
        if ahead_record.built(ahead) and record.cache_hit and ahead is not None:
            record.compiled, record.cache_hit = list(ahead.get("compiled") or []), False
            record.seconds, record.ahead = float(ahead["seconds"]), True
            record.parallel, record.waited = ahead.get("at_once"), ahead.get("waited")
        elif built is not None and record.cache_hit:  # compiled by this call's child, in parallel
            record.compiled, record.cache_hit = list(built.get("compiled") or []), False
            record.seconds += float(built["seconds"])
            record.parallel, record.wall = int(built["parallel"]), float(built["wall"])
        if record.libraries:
            self.records.append(record.to_dict())


BUILD_ERROR = "Error building extension"


def compile_message(output: str, most: int = 6) -> str:
    """The compiler's own error lines from a failed build's output (torch puts the ninja
    command lines first, which would fill any short message), else its last lines."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    # Not the compiler: ninja's commands, traceback source lines, this harness's own frames.
    noise = ("[", "FAILED", "raise ", "nsight_agent.")
    errors = [ln for ln in lines if "error" in ln.lower() and not ln.startswith(noise)]
    picked = [e for e in errors if BUILD_ERROR not in e and "Traceback" not in e][:most]
    return " | ".join(picked or lines[-most:])[:1500]
