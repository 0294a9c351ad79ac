"""Output checks run inside the harness: a variant's outputs against the baseline's.

A variant is correct only if its outputs have the baseline's structure, shapes and dtypes,
hold no NaN or Inf, do not share memory with another variant's tensors, and are close
within (rtol, atol). Defaults depend on the dtype: reduced precision gets looser bounds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch

# (rtol, atol) per dtype; looser than torch.testing's because kernels reorder reductions.
_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float16: (1e-2, 1e-3),
    torch.bfloat16: (2e-2, 1e-2),
    torch.float32: (1e-4, 1e-5),
    torch.float64: (1e-7, 1e-9),
    torch.complex64: (1e-4, 1e-5),
    torch.complex128: (1e-7, 1e-9),
}
_FP8_TOLERANCE = (1.25e-1, 1e-2)


def default_tolerances(dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) for comparing tensors of ``dtype``; integers and booleans compare exactly."""
    if dtype in _TOLERANCES:
        return _TOLERANCES[dtype]
    if dtype.is_floating_point:  # float8 variants
        return _FP8_TOLERANCE
    return (0.0, 0.0)


@dataclass
class CheckOutcome:
    """The verdict on one (variant, config); ``reason`` is machine-readable."""

    ok: bool
    reason: str  # ok | mismatch | nonfinite | shape | dtype | structure | alias
    message: str
    max_abs_err: float | None = None
    max_rel_err: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


STRUCTURAL = frozenset({"shape", "dtype", "structure", "alias"})


def flatten(outputs: Any) -> list[tuple[str, torch.Tensor]]:
    """(path, tensor) pairs of an entry's return value; raises TypeError for other values."""
    if isinstance(outputs, torch.Tensor):
        return [("out", outputs)]
    if isinstance(outputs, (tuple, list)):
        pairs = []
        for i, item in enumerate(outputs):
            pairs += [(f"out[{i}]{p[3:]}", t) for p, t in flatten(item)]
        return pairs
    if isinstance(outputs, dict):
        pairs = []
        for key, item in outputs.items():
            pairs += [(f"out[{key!r}]{p[3:]}", t) for p, t in flatten(item)]
        return pairs
    raise TypeError(
        f"an entry must return a tensor, or a tuple/list/dict of tensors; got {type(outputs).__name__}"
    )


def storages(tensors: Iterable[torch.Tensor]) -> set[int]:
    """Addresses of the memory behind ``tensors`` (views of one buffer share it)."""
    return {t.untyped_storage().data_ptr() for t in tensors if t.numel() > 0}


def check_single(outputs: Any) -> CheckOutcome:
    """What can be checked without a reference: tensors only, all finite."""
    try:
        pairs = flatten(outputs)
    except TypeError as err:
        return CheckOutcome(False, "structure", str(err))
    if not pairs:
        return CheckOutcome(False, "structure", "the entry returned no tensor")
    for path, t in pairs:
        bad = _nonfinite(t)
        if bad:
            return CheckOutcome(False, "nonfinite", f"{path} holds {bad}")
    return CheckOutcome(True, "ok", "outputs are finite tensors")


def compare(
    outputs: Any,
    reference: Any,
    rtol: float | None,
    atol: float | None,
    table: Mapping[str, tuple[float, float]] | None = None,
) -> CheckOutcome:
    """Compare a variant's ``outputs`` with the baseline's ``reference``; a dtype named in
    ``table`` ("float32": (rtol, atol)) gets those bounds, others ``rtol``/``atol`` or ours."""
    try:
        got, want = flatten(outputs), flatten(reference)
    except TypeError as err:
        return CheckOutcome(False, "structure", str(err))
    if [p for p, _ in got] != [p for p, _ in want]:
        return CheckOutcome(
            False,
            "structure",
            f"returns {[p for p, _ in got]} but the baseline returns {[p for p, _ in want]}",
        )
    max_abs = max_rel = 0.0
    failures: list[str] = []
    for (path, a), (_, b) in zip(got, want):
        if a.shape != b.shape:
            return CheckOutcome(
                False, "shape", f"{path} has shape {tuple(a.shape)}, baseline {tuple(b.shape)}"
            )
        if a.dtype != b.dtype:
            return CheckOutcome(False, "dtype", f"{path} has dtype {a.dtype}, baseline {b.dtype}")
        for tensor, whose in ((a, ""), (b, "baseline ")):
            bad = _nonfinite(tensor)
            if bad:
                return CheckOutcome(False, "nonfinite", f"{whose}{path} holds {bad}")
        r_default, a_default = default_tolerances(a.dtype)
        r = r_default if rtol is None else rtol
        t = a_default if atol is None else atol
        r, t = (table or {}).get(str(a.dtype).removeprefix("torch."), (r, t))
        abs_err, rel_err, n_bad = _errors(a, b, r, t)
        max_abs, max_rel = max(max_abs, abs_err), max(max_rel, rel_err)
        if n_bad:
            failures.append(
                f"{path}: {n_bad} of {a.numel()} elements differ beyond rtol={r:g}, atol={t:g} "
                f"(max abs err {abs_err:.3g}, max rel err {rel_err:.3g})"
            )
    if failures:
        return CheckOutcome(False, "mismatch", "; ".join(failures), max_abs, max_rel)
    return CheckOutcome(True, "ok", "matches the baseline", max_abs, max_rel)


def _nonfinite(t: torch.Tensor) -> str:
    if not (t.is_floating_point() or t.is_complex()):
        return ""
    n_nan = int(torch.isnan(t).sum().item())
    n_inf = int(torch.isinf(t).sum().item())
    parts = [f"{n} {kind}" for n, kind in ((n_nan, "NaN"), (n_inf, "Inf")) if n]
    return " and ".join(parts)


# Elements compared at once: the errors are computed in float64 (five such temporaries), so an
# fp32 output compared whole needs ten times its size or more beside it (KernelBench's 6 GiB
# level-1 activations on the H200: out of memory); in chunks of this many, about 0.2 GiB.
ERROR_CHUNK = 1 << 22


def _errors(a: torch.Tensor, b: torch.Tensor, rtol: float, atol: float) -> tuple[float, float, int]:
    """(max absolute error, max relative error, number of elements out of tolerance)."""
    if a.numel() == 0:
        return 0.0, 0.0, 0
    if a.dtype == torch.bool:
        a, b = a.to(torch.uint8), b.to(torch.uint8)
    wide = torch.complex128 if a.is_complex() else torch.float64
    flat_a, flat_b = a.detach().reshape(-1), b.detach().reshape(-1)
    max_abs = max_rel = 0.0
    n_bad = 0
    for start in range(0, flat_a.numel(), ERROR_CHUNK):
        x = flat_a[start : start + ERROR_CHUNK].to(wide)
        # the reference may wait on the host (the timing path's copies): one conversion
        y = flat_b[start : start + ERROR_CHUNK].to(device=x.device, dtype=wide)
        diff = (x - y).abs()
        ref = y.abs()
        rel = torch.where(
            ref > 0, diff / ref.clamp_min(1e-300), torch.where(diff > 0, math.inf, 0.0)
        )
        n_bad += int((diff > atol + rtol * ref).sum().item())
        max_abs = max(max_abs, float(diff.max().item()))
        max_rel = max(max_rel, float(rel.max().item()))
    return max_abs, max_rel, n_bad
