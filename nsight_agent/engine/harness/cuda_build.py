"""CUDA C++ source -> a Python extension module, cached by the hash of source and flags.

On a CUDA machine the source goes through ``torch.utils.cpp_extension.load_inline`` into a
build directory named by sha256(source, functions, flags): an identical second request
finds the built library there and does not compile again. Without a GPU (CI, a laptop),
``check_compile`` runs ``nvcc --ptx`` on the same file: the compiler front end parses host
and device code, so errors surface with their line, without building the library.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import re
import shutil
import sysconfig
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from nsight_agent.engine import process
from nsight_agent.engine.harness import ahead_record, ext_builds

# load_inline puts these three lines above the CUDA source; our nvcc check does the same, so
# a compiler line number minus HEADER_LINES is the line in the user's source.
HEADER = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"
HEADER_LINES = 3
CUDA_FLAGS = ("-O3", "-lineinfo")
CHECK_TIMEOUT_S = 300.0


class CompileError(Exception):
    """The compiler rejected the source; ``line`` is in the user's CUDA source."""

    def __init__(self, message: str, line: int | None, log: str) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.log = log


@dataclass
class BuildInfo:
    """What a build did: recorded in the manifest (compile seconds, cache hit)."""

    key: str
    build_dir: str
    mode: str  # "load_inline" (built and loaded) or "nvcc-check" (compiled, not loaded)
    seconds: float
    cache_hit: bool
    functions: list[str]
    ahead: bool = False  # built before the job queued for a GPU (``ahead_record``)
    parallel: int | None = None  # ahead: builds of the machine running when it started
    waited: float | None = None  # ahead: seconds it waited for a build slot

    def built_ahead(self, record: dict[str, Any] | None) -> BuildInfo:
        """This cache hit as the build made ahead of the GPU queue, when one made it."""
        if self.cache_hit and record is not None and ahead_record.built(record):
            self.cache_hit, self.ahead, self.seconds = False, True, float(record["seconds"])
            self.parallel, self.waited = record.get("at_once"), record.get("waited")
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def bindings(functions: Sequence[str]) -> str:
    """pybind11 definitions appended after the user's source (so its line numbers stay)."""
    defs = "".join(f'  m.def("{f}", &{f}, "{f}");\n' for f in functions)
    return (
        f"\n#include <torch/extension.h>\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{\n{defs}}}\n"
    )


def source_key(source: str, functions: Sequence[str], flags: Sequence[str]) -> str:
    payload = json.dumps([source, list(functions), list(flags)])
    return hashlib.sha256(payload.encode()).hexdigest()


def build(
    source: str,
    functions: Sequence[str],
    cache_root: Path,
    flags: Sequence[str] = CUDA_FLAGS,
) -> tuple[ModuleType, BuildInfo]:
    """Compile (or reuse) the extension and import it; raises CompileError."""
    from torch.utils.cpp_extension import load_inline

    _check_functions(functions)
    key = source_key(source, functions, flags)
    name = f"nsa_cuda_{key[:16]}"
    build_dir = cache_root / key
    start = time.monotonic()
    ahead = _ahead(build_dir)
    # Our lock breaks a baton left by a killed build; only the present GPU's arch is built.
    try:
        with ext_builds.build_lock(build_dir), ext_builds.env_set(ext_builds.compiler_env()):
            hit = any(build_dir.glob(f"{name}*.so"))
            module = load_inline(  # type: ignore[no-untyped-call]
                name=name,
                cpp_sources=[""],
                build_directory=str(build_dir),
                verbose=False,
                **cuda_file(source + bindings(functions), flags, load_inline),
            )
    except ext_builds.BuildLockTimeout:
        raise
    except Exception as err:  # torch raises RuntimeError with ninja's output
        log = str(err)
        line, message = parse_errors(log, "cuda.cu", source.count("\n") + 1)
        raise CompileError(message, line, log) from None
    info = BuildInfo(
        key, str(build_dir), "load_inline", time.monotonic() - start, hit, [*functions]
    )
    return module, info.built_ahead(ahead)


def cuda_file(code: str, flags: Sequence[str], load_inline: Any) -> dict[str, Any]:
    """load_inline's CUDA arguments. The bindings include torch/extension.h in the .cu file,
    so its C++ file needs nothing: where torch can leave out the headers it adds, the C++ file
    is empty (a compile of torch's headers less, seconds of CPU) and the .cu file gets
    the same three lines torch would put above it (the same text, so the same library)."""
    if "no_implicit_headers" in inspect.signature(load_inline).parameters:
        return {
            "cuda_sources": [HEADER + code],
            "extra_cuda_cflags": list(flags),
            "no_implicit_headers": True,
        }
    return {"cuda_sources": [code], "extra_cuda_cflags": list(flags)}


def _ahead(build_dir: Path) -> dict[str, Any] | None:
    """The record of a build made ahead in ``build_dir``; its compile errors raised."""
    record = ahead_record.read(build_dir)
    if ahead_record.failure(record) is not None and record is not None:
        raise CompileError(str(record["error"]), record.get("line"), str(record.get("log", "")))
    return record


def find_nvcc() -> str | None:
    """nvcc where torch's extension builder looks: $CUDA_HOME, $CUDA_PATH, PATH,
    /usr/local/cuda."""
    candidates = [
        *(
            os.path.join(os.environ[v], "bin", "nvcc")
            for v in ("CUDA_HOME", "CUDA_PATH")
            if os.environ.get(v)
        ),
        shutil.which("nvcc") or "",
        "/usr/local/cuda/bin/nvcc",
    ]
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


def check_compile(
    source: str,
    functions: Sequence[str],
    cache_root: Path,
    flags: Sequence[str] = CUDA_FLAGS,
    timeout: float = CHECK_TIMEOUT_S,
) -> BuildInfo:
    """Compile to PTX only (no GPU, no link); raises CompileError, or RuntimeError without nvcc."""
    from torch.utils.cpp_extension import include_paths

    _check_functions(functions)
    nvcc = find_nvcc()
    if nvcc is None:
        raise RuntimeError("nvcc was not found ($CUDA_HOME/bin, PATH, /usr/local/cuda/bin)")
    key = source_key(source, functions, flags)
    build_dir = cache_root / key
    build_dir.mkdir(parents=True, exist_ok=True)
    marker = build_dir / "nvcc-check.ok"
    ahead = _ahead(build_dir)
    if marker.exists():
        info = BuildInfo(key, str(build_dir), "nvcc-check", 0.0, True, [*functions])
        return info.built_ahead(ahead)
    cu = build_dir / "check.cu"
    cu.write_text(HEADER + source + bindings(functions))
    includes = [*include_paths(), sysconfig.get_paths()["include"]]
    argv = [nvcc, "--ptx", "-x", "cu", "-std=c++20", "-DTORCH_EXTENSION_NAME=nsa_check"]
    argv += [f"-I{p}" for p in includes] + [*flags, str(cu), "-o", str(build_dir / "check.ptx")]
    start = time.monotonic()
    try:
        proc = process.run_capture(argv, timeout=timeout)
    except process.RunTimeout:
        raise CompileError(f"nvcc ran past {timeout:.0f} s", None, "") from None
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        log = proc.stdout + proc.stderr
        line, message = parse_errors(log, cu.name, source.count("\n") + 1)
        raise CompileError(message, line, log)
    marker.write_text("ok\n")
    return BuildInfo(key, str(build_dir), "nvcc-check", seconds, False, [*functions])


def _check_functions(functions: Sequence[str]) -> None:
    if not functions:
        raise CompileError(
            "no CUDA functions to expose: list the C++ functions to call from Python in "
            "cuda_functions (or CUDA_FUNCTIONS in the module)",
            None,
            "",
        )


# nvcc's front end: "file.cu(12): error: ..."; gcc/clang: "file.cu:12:5: error: ...".
_ERROR_LINE = re.compile(
    r"^(?P<file>[^\s:()]+?)(?:\((?P<l1>\d+)\)|:(?P<l2>\d+):\d+):\s*(?:fatal )?error:?\s*(?P<msg>.*)$",
    re.MULTILINE,
)


def parse_errors(log: str, file_name: str, user_lines: int) -> tuple[int | None, str]:
    """(line in the user's source, compiler message) of the first error in ``file_name``.

    An error past the user's last line is in the generated bindings: a name listed in
    cuda_functions that the source does not define (or defines as a template/overload).
    """
    errors = [m for m in _ERROR_LINE.finditer(log) if Path(m["file"]).name == file_name]
    if not errors:
        lines = [ln for ln in log.splitlines() if "error" in ln.lower()]
        return None, "\n".join(lines[:20]) or log.strip()[-2000:] or "compilation failed"
    shown = []
    for m in errors[:10]:
        line = int(m["l1"] or m["l2"]) - HEADER_LINES
        if line > user_lines:
            shown.append(
                f"in the generated bindings: error: {m['msg']} (is every name in "
                "cuda_functions a plain, non-template function of the source?)"
            )
        else:
            shown.append(f"line {line}: error: {m['msg']}")
    first = int(errors[0]["l1"] or errors[0]["l2"]) - HEADER_LINES
    return (first if 0 < first <= user_lines else None), "\n".join(shown)
