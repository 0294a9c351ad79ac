"""One build ahead of the GPU queue, in a child process of the executor's.

    python -m nsight_agent.engine.harness.build_child <task.json> <result.json>

The task (``build_plan.BuildTask`` and where the plan's files are) is built the way the
harness will build it, so that the harness's import then finds it done: a module is imported
under the harness's name with its extension builds redirected (``ext_builds.Builds``); the
``cuda`` language's source goes through ``cuda_build`` (``nvcc --ptx`` only, without a GPU).
The result says whether it compiled (``ok`` and seconds), failed to compile (``ok`` false and
the compiler's errors, which the harness then raises as its own), found the build already
done (``built`` false), or stopped for another reason (``skipped``: the harness decides, as
it would have without this child). The user's code runs here as in the harness's import.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from nsight_agent.engine.harness import cuda_build, runtime
from nsight_agent.engine.harness.ext_builds import Builds
from nsight_agent.engine.harness.languages import adapter_for

DID_NOT_COMPILE = "the torch extension did not compile: "


def build_ext(task: dict[str, Any]) -> dict[str, Any]:
    folder = Path(task["dir"])
    sys.path.insert(0, str(folder))  # the run folder's siblings import one another
    device = runtime.default_device()
    adapter_for(task["language"]).environment(device)
    builds = Builds(task["cache"])
    try:
        runtime.load_user_module(task["module"], str(folder / task["file"]), builds)
    except Exception as err:  # the import's SourceError, or anything the user's code raised
        text = str(err)
        if DID_NOT_COMPILE in text:
            return {"ok": False, "error": text.split(DID_NOT_COMPILE, 1)[1]}
        return {"skipped": text[-2000:]}
    mine = [r for r in builds.records if r["module"] == task["module"]]
    if not mine or mine[0]["cache_hit"]:
        return {"built": False}  # another process built it while this one waited
    return {"ok": True, "seconds": mine[0]["seconds"], "compiled": mine[0]["compiled"]}


def build_cuda(task: dict[str, Any]) -> dict[str, Any]:
    cache, source, functions = Path(task["cache"]), task["source"], task["functions"]
    try:
        if runtime.default_device().startswith("cuda"):
            info = cuda_build.build(source, functions, cache)[1]
        else:
            info = cuda_build.check_compile(source, functions, cache)
    except cuda_build.CompileError as err:
        return {"ok": False, "error": err.message, "line": err.line, "log": err.log[-8000:]}
    except Exception as err:  # no nvcc, a lock held too long: the harness says it
        return {"skipped": str(err)[-2000:]}
    if info.cache_hit:
        return {"built": False}
    return {"ok": True, "seconds": info.seconds, "mode": info.mode}


def main(argv: list[str]) -> int:
    task = json.loads(Path(argv[0]).read_text())
    start = time.monotonic()
    result = build_cuda(task) if task["kind"] == "cuda" else build_ext(task)
    result.setdefault("seconds", time.monotonic() - start)
    Path(argv[1]).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
