"""Helpers the harness program (``program.py``) and the timing loop call next to the user's
code: load the user's module, run its functions stage by stage (any failure a
``SourceError`` of its stage), build inputs, call entries and count their kernels; time
nothing themselves.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import json
import random
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from nsight_agent.engine.harness import gpu_activity
from nsight_agent.engine.harness.errors import SourceError
from nsight_agent.engine.harness.ext_builds import Builds

USER_FILES: set[str] = set()
LOST_CALLS: list[int] = []  # per pre-flight call whose kernel records CUPTI lost: how many


def default_device() -> str:
    try:
        import torch
    except ImportError:
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def user_location(exc: BaseException) -> tuple[str | None, int | None]:
    """(file, line) of the innermost traceback frame in a user source file."""
    if isinstance(exc, SyntaxError) and exc.filename and _is_user(exc.filename):
        return Path(exc.filename).name, exc.lineno
    found: tuple[str | None, int | None] = (None, None)
    for frame in traceback.extract_tb(exc.__traceback__):
        if _is_user(frame.filename):
            found = (Path(frame.filename).name, frame.lineno)
    return found


def _is_user(filename: str) -> bool:
    return str(Path(filename).resolve()) in USER_FILES


@contextlib.contextmanager
def stage(name: str, variant: str | None = None, config_index: int | None = None) -> Iterator[None]:
    """Turn any exception raised inside into a SourceError of stage ``name``: a source's
    ``sys.exit()`` or ``raise KeyboardInterrupt`` too, which would otherwise end the program
    as a failure of no stage."""
    try:
        yield
    except SourceError:
        raise
    except (Exception, SystemExit, KeyboardInterrupt) as exc:
        file, line = user_location(exc)
        message = f"{type(exc).__name__}: {exc}"
        raise SourceError(
            name,
            message,
            line=line,
            file=file,
            traceback=traceback.format_exc(),
            variant=variant,
            config_index=config_index,
        ) from exc


class Dropped(dict[str, dict[str, Any]]):
    """Variants that failed alone, by name: each a verdict (error, no_kernel, incorrect, suspect) with
    the error's stage, message and line. The baseline never lands here: its failure ends the
    run, since nothing can be compared without it."""

    def __init__(self, baseline: str) -> None:
        super().__init__()
        self.baseline = baseline

    @contextlib.contextmanager
    def isolate(
        self, name: str, stage_name: str, config_index: int | None = None
    ) -> Iterator[None]:
        """``stage``, but a non-baseline variant's failure drops that variant, not the run."""
        try:
            with stage(stage_name, name, config_index):
                yield
        except SourceError as err:
            if name == self.baseline or err.variant not in (None, name):
                raise
            self.drop(name, "error", err.to_dict())

    def drop(self, name: str, verdict: str, detail: dict[str, Any]) -> None:
        if name not in self:
            detail = {k: v for k, v in detail.items() if k != "traceback"}
            self[name] = {"verdict": verdict, **detail}


def load_user_module(name: str, path: str, builds: Builds | None = None) -> ModuleType:
    """Import ``path`` as module ``name`` (not as __main__); failures are stage ``import``.
    With ``builds``, the torch extensions the source builds at import go to its own folder."""
    resolved = Path(path).resolve()
    USER_FILES.add(str(resolved))
    with stage("import"):
        spec = importlib.util.spec_from_file_location(name, resolved)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        with builds.around(name, resolved) if builds else contextlib.nullcontext():
            spec.loader.exec_module(module)
    return module


def function_of(module: ModuleType, name: str, what: str) -> Callable[..., Any]:
    fn = getattr(module, name, None)
    if not callable(fn):
        defined = sorted(
            n for n, v in vars(module).items() if callable(v) and not n.startswith("_")
        )
        raise SourceError(
            "import",
            f"the source defines no function {name!r} ({what}); callables defined: "
            f"{', '.join(defined) or 'none'}",
        )
    return fn  # type: ignore[no-any-return]


def seed_all(seed: int) -> None:
    """Same seed before every setup call: each variant gets identical, fresh inputs."""
    random.seed(seed)
    with contextlib.suppress(ImportError):
        import numpy

        numpy.random.seed(seed % 2**32)
    with contextlib.suppress(ImportError):
        import torch

        torch.manual_seed(seed)


def build_inputs(setup: Callable[..., Any], config: dict[str, Any], device: str) -> Any:
    """``setup(**config, device=device)``; ``device`` only if setup takes it. The inputs are
    ready when this returns: an entry that computes on a stream of its own, which does not
    wait for the caller's (KernelBench's non-blocking-stream test kernel), would otherwise
    read them half written, and its check would depend on a race of ours."""
    params = inspect.signature(setup).parameters
    takes_device = "device" in params or any(p.kind == p.VAR_KEYWORD for p in params.values())
    built = setup(**config, device=device) if takes_device else setup(**config)
    synchronize(device)
    return built


def call(entry: Callable[..., Any], inputs: Any) -> Any:
    """A tuple is passed positionally, a dict by keyword, anything else as one argument."""
    if isinstance(inputs, tuple):
        return entry(*inputs)
    if isinstance(inputs, dict):
        return entry(**inputs)
    return entry(inputs)


def tensors_in(obj: Any) -> list[Any]:
    """Every torch tensor in a (nested) tuple/list/dict."""
    import torch

    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (tuple, list)):
        return [t for item in obj for t in tensors_in(item)]
    if isinstance(obj, dict):
        return [t for item in obj.values() for t in tensors_in(item)]
    return []


def run_order(names: Sequence[str], run: int) -> list[str]:
    """The order of one run's calls: the list rotated by one place every two runs, reversed on
    odd runs (A B C, C B A, B C A, A C B, ...). Reversal cancels a linear drift within each
    pair; the rotation moves every variant through the first and last places, which no
    variant may hold for good (on the H200 under ncu at a few microseconds, a baseline always
    at an end reads measurably slower than identical copies never there)."""
    k = (run // 2) % len(names) if names else 0
    rotated = [*names[k:], *names[:k]]
    return rotated if run % 2 == 0 else rotated[::-1]


_SYNC: list[Callable[[], None]] = []  # torch.cuda.synchronize as pinned by pin_synchronize


def pin_synchronize() -> None:
    """Keep ``torch.cuda.synchronize`` as it is now, before any user code runs (the first call
    in a process wins): a variant that replaces it must not make the harness's own waits
    return early. On the H200 an adversarial variant's no-op replacement, not yet
    put back, let the next call's pre-flight count stop before its kernel ended: 0 kernels, and
    an honest baseline was called suspect."""
    if not _SYNC:
        import torch

        _SYNC.append(torch.cuda.synchronize)


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        if _SYNC:
            _SYNC[0]()
            return
        import torch

        torch.cuda.synchronize()


def op_ranges(wanted: bool) -> Any:
    """torch's operator ranges (NVTX, with input shapes) while profiling under ncu, so each
    kernel of a step can be traced to its operator; a no-op without torch, without CUDA (a CPU
    build of torch refuses NVTX) or when not wanted."""
    import contextlib

    if not wanted:
        return contextlib.nullcontext()
    try:
        import torch
    except ImportError:
        return contextlib.nullcontext()
    if not torch.cuda.is_available():
        return contextlib.nullcontext()
    return torch.autograd.profiler.emit_nvtx(record_shapes=True)  # type: ignore[no-untyped-call]


def call_counting_kernels(
    entry: Callable[..., Any],
    inputs: Any,
    device: str,
    launches: list[list[Any]] | None = None,
) -> tuple[Any, list[str] | None, float | None]:
    """Call ``entry``; on CUDA also list the kernels it launched and measure the GPU time of
    the copies and memsets it made (torch.profiler, CUPTI): ncu profiles kernels only, so this
    is the pre-flight's record of the work ncu does not see (ns, the union of their intervals).
    A call one of whose kernel records CUPTI lost has no count (None, as on the CPU): a lost
    record is not a kernel that did not run (``gpu_activity``); ``LOST_CALLS`` keeps them.
    ``launches``: each kernel's [name, launch configuration or None, ns, torch operator or
    None] is appended to it, in the order the GPU ran them (what a launch-sampled ncu run is
    weighed by: collection/launch_sampling.py).
    """
    if not device.startswith("cuda"):
        return call(entry, inputs), None, None
    from torch.autograd.profiler import record_function

    with kineto_profiler(shapes=launches is not None) as prof:
        with record_function(f"{gpu_activity.CALL_PREFIX}0"):
            out = call(entry, inputs)
        synchronize(device)
    # Where the events' metadata holds no grid (all of them on the H200), kineto's trace does.
    found = gpu_activity.attribute(
        prof.kineto_results.events(),
        configs=launches is not None,
        known=lambda: _trace_configs(prof),
    )
    if found.lost.get(0):
        LOST_CALLS.append(found.lost[0])
        return out, None, None
    work = found.calls.get(0, [])
    copies = [(a.start, a.end) for a in work if a.is_copy]
    if launches is not None:
        kernels = sorted((a for a in work if not a.is_copy), key=lambda a: a.start)
        launches += [
            [a.name, list(a.config) if a.config else None, a.end - a.start, a.op] for a in kernels
        ]
    return out, [a.name for a in work if not a.is_copy], float(union_ns(copies))


def _trace_configs(prof: Any) -> dict[int, tuple[int, ...]]:
    """Each kernel's launch configuration by correlation id, from the profiler's Chrome trace."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        return gpu_activity.configs_of_trace(json.loads(path.read_text()))


def kineto_profiler(cpu: bool = True, shapes: bool = False) -> Any:
    """torch's kineto profiler of CPU ranges (``cpu``) and CUDA work, CUPTI underneath: the
    one ``torch.profiler.profile`` makes, without that class's start, which asks
    ``hasattr(torch, "_inductor")`` and so imports torch._inductor and torch._dynamo (seconds,
    a large share of a pre-flight on the H200). Its events: ``.kineto_results.events()``;
    ``shapes``: operators' input sizes recorded (a launch-sampled pre-flight's groups)."""
    from torch.autograd.profiler import profile

    return profile(use_cpu=cpu, use_device="cuda", use_kineto=True, record_shapes=shapes)


def union_ns(intervals: Sequence[tuple[int, int]]) -> int:
    """Length of the union of [start, end) intervals (work on two streams that overlaps
    counts once; gaps do not count)."""
    total, reach = 0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total
