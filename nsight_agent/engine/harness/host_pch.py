"""A precompiled torch header for the C++ file of a candidate's ``load_inline`` build (gcc).

That file starts with ``#include <torch/extension.h>``: gcc reads torch's and pybind11's
headers each build, most of its CPU time for a short source; with the header precompiled the
object file is the same, and a whole candidate build on an H100 machine takes 33.86 s of CPU
against 47.03 s without it (results.build.ours.cpu_s and results.build.ours_cold.cpu_s in
``bench/results/builds/2026-12-06-h100-80gb-hbm3-2f84c92.json``, from bench/build_ahead.py).
gcc looks for ``torch/extension.h.gch`` in each ``-I`` folder before the header itself, and
uses it only when it was made with the same options (otherwise it reads the header), so:

- every ``load_inline`` of a candidate gets ``-I<folder>`` for its arguments (``use``), also
  before the header of that folder exists: the build's command stays the same, so ninja never
  rebuilds a library because the header appeared;
- after a build, the flags torch gave its C++ compile (from ``build.ninja``) are kept in
  ``<folder>/command.json`` (``want``);
- the executor precompiles each wanted header in the background (``python -m
  nsight_agent.engine.harness.host_pch <folder>``), under the folder's lock, renamed into
  place when whole.

One header per set of arguments (a large file), at most ``MOST`` sets, in the user's cache
folder (``NSIGHT_AGENT_PCH_DIR``; every runs root shares it); ``NSIGHT_AGENT_PCH=0`` turns
it off. torch's own ``use_pch=True`` keeps one header in torch's install folder for whichever
flags came last, and its default ``use_pch=False`` deletes it: builds at once with other
flags would undo each other's.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from nsight_agent.engine import bytecode, process

ENV = "NSIGHT_AGENT_PCH"
DIR_ENV = "NSIGHT_AGENT_PCH_DIR"
HEADER = "torch/extension.h.gch"
COMMAND = "command.json"
MOST = 4  # sets of arguments with a header of their own
BUILD_TIMEOUT_S = 900.0


def root() -> Path:
    return Path(os.environ.get(DIR_ENV) or bytecode.user_cache_dir() / "torch-pch")


@functools.cache
def _gcc() -> bool:
    """Whether torch builds with gcc on Linux (the only compiler whose .gch this is)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        from torch.utils import cpp_extension

        compiler = cpp_extension.get_cxx_compiler()  # type: ignore[no-untyped-call]
        return bool(cpp_extension.check_compiler_is_gcc(compiler))
    except Exception:  # an old torch, no compiler: no precompiled header
        return False


def folder_for(arguments: dict[str, Any]) -> Path | None:
    """The header folder of a ``load_inline`` call's arguments; None: none is used."""
    if os.environ.get(ENV) == "0" or arguments.get("no_implicit_headers") or not _gcc():
        return None
    import torch

    with_cuda = arguments.get("with_cuda")
    if with_cuda is None:
        with_cuda = bool(arguments.get("cuda_sources"))
    key = [
        torch.__version__,
        torch.__file__,
        os.environ.get("CXX", ""),
        list(arguments.get("extra_cflags") or []),
        list(arguments.get("extra_include_paths") or []),
        bool(with_cuda),
    ]
    return root() / hashlib.sha256(json.dumps(key).encode()).hexdigest()[:16]


def use(arguments: dict[str, Any]) -> Path | None:
    """Add the header folder to a ``load_inline`` call's ``extra_cflags``; return it."""
    folder = folder_for(arguments)
    if folder is not None:
        arguments["extra_cflags"] = [*(arguments.get("extra_cflags") or []), f"-I{folder}"]
    return folder


def want(folder: Path, build_directory: Path) -> None:
    """After a build in ``build_directory``: keep its C++ flags for ``folder``'s header."""
    if (folder / HEADER).is_file() or (folder / COMMAND).is_file():
        return
    if not folder.is_dir() and len(list(root().glob(f"*/{COMMAND}"))) >= MOST:
        return
    values = {}
    for line in (build_directory / "build.ninja").read_text().splitlines():
        name, sep, value = line.partition(" = ")
        if sep:
            values[name.strip()] = value
    flags = shlex.split(values.get("cflags", ""))
    flags = [f for f in flags if not f.startswith("-DTORCH_EXTENSION_NAME=")]
    from torch.utils.cpp_extension import include_paths

    header = Path(include_paths()[0]) / "torch" / "extension.h"
    command = {"cxx": values.get("cxx", "c++"), "flags": flags, "header": str(header)}
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f"{COMMAND}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(command))
    tmp.replace(folder / COMMAND)


def wanted() -> list[Path]:
    """Folders whose header is wanted and not made yet."""
    return sorted(
        p.parent for p in root().glob(f"*/{COMMAND}") if not (p.parent / HEADER).is_file()
    )


def build(folder: Path, timeout: float = BUILD_TIMEOUT_S) -> bool:
    """Precompile ``folder``'s header; False when another process is making it, or it failed
    (then it is not wanted again: ``command.json`` becomes ``command.failed.json``)."""
    fd = os.open(folder / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        if (folder / HEADER).is_file():
            return True
        command = json.loads((folder / COMMAND).read_text())
        target = folder / HEADER
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")  # gcc never looks for it
        argv = [*shlex.split(command["cxx"]), *command["flags"], "-x", "c++-header"]
        argv += [command["header"], "-o", str(tmp)]
        try:
            done = process.run_to_file(argv, output_path=folder / "build.log", timeout=timeout)
            if done.returncode == 0 and tmp.is_file():
                tmp.replace(target)
                return True
        finally:
            tmp.unlink(missing_ok=True)
        (folder / COMMAND).replace(folder / "command.failed.json")
        return False
    except (OSError, ValueError, KeyError, process.RunTimeout):
        with contextlib.suppress(OSError):
            (folder / COMMAND).replace(folder / "command.failed.json")
        return False
    finally:
        os.close(fd)


if __name__ == "__main__":
    sys.exit(0 if build(Path(sys.argv[1])) else 1)
