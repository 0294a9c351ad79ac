"""Defences of the measurement against variants written to game it, run in the harness and
the timing loop next to the user's code (docs/ANTI_GAMING.md lists what each one catches).

- Inputs that really change: ``seed_ignored`` tells when ``setup`` builds the same values
  whatever the seed (it seeds a generator of its own); ``vary`` then refills every
  floating-point input with fresh values from the run's seed, so a result cached by shape,
  by pointer or by value is wrong on the next run and the output check says so.
- Outputs that are what they claim: ``plain_output_problem`` refuses tensor subclasses and
  proxies (their values could be computed when the checker reads them, outside the timing);
  ``StorageWatch`` notices a variant that returns the storage of an earlier call's output.
- A measurement beyond the variant's reach: ``Guard`` snapshots the functions the timer and
  the checker use before user code is imported, names any a variant replaced and puts them
  back; ``reset_persisting_l2`` undoes an L2 persisting carve-out before each call.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import time
from collections.abc import Iterable
from typing import Any

import torch

from nsight_agent.engine.harness.runtime import tensors_in as tensors_of

# What the timer and the checks call: a variant that replaces one of these changes the
# numbers or the verdict, so each is snapshot before user code runs and checked after.
GUARDED: tuple[tuple[Any, str], ...] = (
    (torch.cuda, "Event"),
    (torch.cuda, "synchronize"),
    (torch.cuda.Event, "record"),
    (torch.cuda.Event, "elapsed_time"),
    (torch.cuda.Event, "synchronize"),
    (torch, "allclose"),
    (torch, "isfinite"),
    (torch, "isclose"),
    (torch, "equal"),
    (torch.Tensor, "clone"),
    (torch.Tensor, "copy_"),
    # the clocks the CPU timer, the timing loop's limits and the speed probe read: a faked
    # clock would make a call free or a loop endless
    (time, "perf_counter_ns"),
    (time, "perf_counter"),
    (time, "monotonic"),
    (time, "monotonic_ns"),
    (time, "time"),
)
VARY_NOTE = (
    "setup ignores the seed (two seeds gave identical inputs, e.g. it seeds a generator of "
    "its own): the harness refilled {refilled} with fresh random values from each run's seed "
    "(uniform within the tensor's own range), so cached results are caught{kept}; pass "
    "options.vary_inputs=false for inputs whose values carry structure (sorted data, "
    "probabilities), and then a result cached by shape is not caught"
)


def constant(t: torch.Tensor) -> bool:
    """All one value (zeros, ones, a fill value): a buffer (an accumulator, an output, a mask,
    a counter) that no seed should change, not data to refill."""
    return t.numel() == 0 or float(t.min()) == float(t.max())


def vary_note(inputs: Any) -> str:
    """VARY_NOTE for these inputs: how many were refilled, and which kinds were kept."""
    tensors = floating(inputs)
    kept = sum(constant(t) for t in tensors)
    n = len(tensors) - kept
    refilled = f"{n} floating-point input{'s' if n != 1 else ''}"
    left = (
        f"; {kept} constant one{'s' if kept != 1 else ''} (zeros, ones, a fill value: "
        "buffers such as accumulators, outputs, masks) and any integer ones were left as set up"
        if kept
        else "; integer inputs were left as set up"
    )
    return VARY_NOTE.format(refilled=refilled, kept=left)


def same_values(a: Any, b: Any) -> bool:
    """Whether two builds of the inputs hold the same values (tensors compared exactly)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and equal_tensors(a.detach(), b.detach())
        )
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(same_values(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_values(a[k], b[k]) for k in a)
    try:
        return bool(a == b)
    except Exception:  # a value without a usable ==: treat it as changing
        return False


# Elements compared at once by ``equal_tensors``: two builds of inputs from different seeds
# differ in the first chunk, so the comparison ends there.
EQUAL_CHUNK = 1 << 24


def equal_tensors(a: torch.Tensor, b: torch.Tensor) -> bool:
    """``torch.equal`` on the tensors' own device, in chunks, stopping at the first
    difference. Both were copied to the host before: for a KernelBench input of 8.6 GB, about
    17 GB of transfers per config, in the pre-flight and again in the timing loop."""
    if a.device != b.device:
        return bool(torch.equal(a.cpu(), b.cpu()))
    if not (a.is_contiguous() and b.is_contiguous()):
        return bool(torch.equal(a, b))
    flat_a, flat_b = a.reshape(-1), b.reshape(-1)
    return all(
        torch.equal(flat_a[i : i + EQUAL_CHUNK], flat_b[i : i + EQUAL_CHUNK])
        for i in range(0, flat_a.numel(), EQUAL_CHUNK)
    )


def floating(obj: Any) -> list[torch.Tensor]:
    return [t for t in tensors_of(obj) if t.is_floating_point() and t.numel() > 0]


def seed_ignored(first: Any, second: Any) -> bool:
    """True when inputs built from two seeds are identical and hold floating-point tensors
    that are not constant (constant ones are buffers: nothing to refill)."""
    return any(not constant(t) for t in floating(first)) and same_values(first, second)


def vary(inputs: Any, seed: int) -> None:
    """Refill every floating-point input tensor that is not constant, in place: uniform values
    within its own [min, max], from a generator seeded with ``seed``, so every variant of one
    run gets the same new values. A constant tensor is a buffer and stays as set up: refilling
    an accumulator or a zero-initialised output would change what the kernel computes."""
    with torch.no_grad():
        for i, t in enumerate(floating(inputs)):
            if constant(t):
                continue
            lo, hi = float(t.min()), float(t.max())
            gen = torch.Generator(device=t.device)
            gen.manual_seed(seed * 1009 + i)
            fresh = torch.rand(t.shape, generator=gen, device=t.device, dtype=torch.float32)
            t.copy_((fresh * (hi - lo) + lo).to(t.dtype))


def plain_output_problem(out: Any) -> str | None:
    """Why an entry's return value is not plain tensors (or numbers), if it is not: a tensor
    subclass or a proxy could compute its values when the checker reads them."""
    if isinstance(out, torch.Tensor):
        if type(out) not in (torch.Tensor, torch.nn.Parameter):
            return (
                f"returns a {type(out).__name__} (a tensor subclass): outputs must be plain "
                "tensors, materialised inside the timed call"
            )
        return None
    if isinstance(out, (tuple, list)):
        return next((p for p in map(plain_output_problem, out) if p), None)
    if isinstance(out, dict):
        return next((p for p in map(plain_output_problem, out.values()) if p), None)
    if out is None or isinstance(out, (bool, int, float, complex, str)):
        return None
    return (
        f"returns a {type(out).__name__}, not tensors: outputs must be plain tensors, "
        "materialised inside the timed call"
    )


def output_bytes(out: Any) -> int:
    """Bytes the outputs occupy (each storage once)."""
    seen: dict[int, int] = {}
    for t in tensors_of(out):
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(seen.values())


class StorageWatch:
    """Per variant, the output storages of its previous call, kept alive so that no fresh
    allocation can reuse their addresses: a later output at one of them is a returned cache."""

    def __init__(self) -> None:
        self._kept: dict[str, list[torch.Tensor]] = {}

    def reused(self, name: str, out: Any) -> str | None:
        before = {t.untyped_storage().data_ptr() for t in self._kept.get(name, [])}
        mine = [t for t in tensors_of(out) if t.numel() > 0]
        self._kept[name] = mine
        if before & {t.untyped_storage().data_ptr() for t in mine}:
            return (
                "returned the same output storage as its previous call while the inputs "
                "changed (a cached result)"
            )
        return None

    def clear(self) -> None:
        self._kept.clear()


class Guard:
    """The functions in ``GUARDED`` as they were before user code was imported."""

    def __init__(self, extra: Iterable[tuple[Any, str]] = ()) -> None:
        self.saved = [(owner, name, getattr(owner, name)) for owner, name in (*GUARDED, *extra)]

    def replaced(self) -> list[str]:
        """Names of the guarded functions that were replaced since; they are put back."""
        found = []
        for owner, name, original in self.saved:
            if getattr(owner, name, None) is not original:
                found.append(f"{getattr(owner, '__name__', owner)}.{name}")
                with contextlib.suppress(AttributeError, TypeError):
                    setattr(owner, name, original)
        return found


def replaced_note(names: list[str]) -> str:
    return (
        f"replaced {', '.join(names)} (functions the timer or the checker use): its numbers "
        "are not trusted; the originals were put back"
    )


_CUDART: list[Any] = []


def _cudart() -> Any:
    """The CUDA runtime library this process uses (torch's own, or the system's)."""
    if _CUDART:
        return _CUDART[0]
    found = None
    patterns = [os.path.join(os.path.dirname(torch.__file__), "lib", "libcudart.so*")]
    patterns += [os.path.join(d, "*", "lib", "libcudart.so*") for d in _site_nvidia_dirs()]
    names = sorted(p for pat in patterns for p in glob.glob(pat))
    for name in [*names, "libcudart.so", "libcudart.so.13", "libcudart.so.12"]:
        try:
            found = ctypes.CDLL(name)
            break
        except OSError:
            continue
    _CUDART.append(found)
    return found


def _site_nvidia_dirs() -> list[str]:
    with contextlib.suppress(ImportError):
        import nvidia  # type: ignore[import-not-found,import-untyped]  # torch's pip CUDA packages

        return [str(p) for p in getattr(nvidia, "__path__", [])]
    return []


CUDA_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06  # cudaLimitPersistingL2CacheSize


def reset_persisting_l2() -> bool:
    """Drop every persisting L2 line and set the carve-out to 0, so an access-policy window
    a variant set cannot keep its data in L2 across calls. False when it could not be done."""
    lib = _cudart()
    if lib is None:
        return False
    try:
        ok = lib.cudaCtxResetPersistingL2Cache() == 0
        limit = ctypes.c_size_t(0)
        ok = ok and lib.cudaDeviceSetLimit(CUDA_LIMIT_PERSISTING_L2_CACHE_SIZE, limit) == 0
        # A failed call leaves the runtime's last error set, and the user's next launch
        # would report it as its own: clear it.
        lib.cudaGetLastError()
        return bool(ok)
    except (AttributeError, OSError):
        return False
