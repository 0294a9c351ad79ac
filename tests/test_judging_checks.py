"""The harness's output checks (engine/harness/checks.py) held at their edges.

The verdict a variant gets is what the product sells: these tests pin the NaN/Inf rule for a
variant against a finite baseline, the tolerance of each dtype at large and small magnitudes
(so that swapping rtol and atol, or loosening either, fails), the inclusive bound, and the
paths, messages and error numbers a verdict carries.
"""

from __future__ import annotations

import math

import pytest
import torch

from nsight_agent.engine.harness import checks

# --- a variant's NaN/Inf against a finite baseline ---------------------------------------------


@pytest.mark.parametrize(("bad", "text"), [(math.nan, "1 NaN"), (math.inf, "1 Inf")])
def test_a_variants_nonfinite_output_against_a_finite_baseline_is_incorrect(
    bad: float, text: str
) -> None:
    outcome = checks.compare(torch.tensor([1.0, bad]), torch.tensor([1.0, 2.0]), 1e9, 1e9)
    assert (outcome.ok, outcome.reason) == (False, "nonfinite")
    assert outcome.message == f"out holds {text}"
    assert outcome.reason not in checks.STRUCTURAL
    assert (outcome.max_abs_err, outcome.max_rel_err) == (None, None)


def test_a_nonfinite_baseline_is_named_as_the_baseline() -> None:
    outcome = checks.compare(torch.tensor([1.0, 2.0]), torch.tensor([1.0, -math.inf]), None, None)
    assert (outcome.ok, outcome.reason) == (False, "nonfinite")
    assert outcome.message == "baseline out holds 1 Inf"


def test_nan_and_inf_are_both_counted_in_the_message() -> None:
    got = torch.tensor([math.nan, math.nan, math.inf, 0.0])
    assert checks.compare(got, torch.zeros(4), None, None).message == ("out holds 2 NaN and 1 Inf")
    single = checks.check_single((torch.zeros(2), got))
    assert (single.ok, single.reason, single.message) == (
        False,
        "nonfinite",
        "out[1] holds 2 NaN and 1 Inf",
    )


def test_a_nonfinite_second_output_is_caught_after_a_clean_first() -> None:
    ref = (torch.ones(2), torch.ones(2))
    outcome = checks.compare((torch.ones(2), torch.tensor([1.0, math.nan])), ref, None, None)
    assert (outcome.reason, outcome.message) == ("nonfinite", "out[1] holds 1 NaN")


def test_complex_nonfinite_is_caught_and_integers_have_none() -> None:
    z = torch.tensor([1 + 1j, complex(math.nan, 0.0)], dtype=torch.complex64)
    assert checks.compare(z, torch.ones(2, dtype=torch.complex64), None, None).reason == (
        "nonfinite"
    )
    ints = torch.tensor([1, 2, 3])
    assert checks.check_single(ints).ok
    assert checks.check_single(ints).message == "outputs are finite tensors"


# --- tolerances per dtype, at large and small magnitudes ---------------------------------------
#
# Each row: dtype, (rtol, atol), a large reference value with an error that passes only by
# rtol (it fails if atol and rtol are swapped), and an error at zero that fails by atol (it
# passes if they are swapped). All values are exact in their dtype.
TOLERANCE_CASES = [
    (torch.float32, (1e-4, 1e-5), 1e4, 0.5, 5e-5),
    (torch.float16, (1e-2, 1e-3), 1024.0, 4.0, 4.8828125e-3),
    (torch.bfloat16, (2e-2, 1e-2), 1024.0, 16.0, 1.5625e-2),
    (torch.float64, (1e-7, 1e-9), 1e6, 0.05, 5e-8),
    (torch.complex64, (1e-4, 1e-5), 1e4, 0.5, 5e-5),
    (torch.complex128, (1e-7, 1e-9), 1e6, 0.05, 5e-8),
]


@pytest.mark.parametrize(
    ("dtype", "tolerances", "big", "big_err", "small_err"),
    TOLERANCE_CASES,
    ids=[str(c[0]).removeprefix("torch.") for c in TOLERANCE_CASES],
)
def test_tolerance_at_large_and_small_magnitudes(
    dtype: torch.dtype,
    tolerances: tuple[float, float],
    big: float,
    big_err: float,
    small_err: float,
) -> None:
    rtol, atol = tolerances
    assert checks.default_tolerances(dtype) == tolerances
    # large magnitude: within rtol x |ref|, far beyond atol
    ref = torch.tensor([big, -big], dtype=dtype)
    got = torch.tensor([big + big_err, -big], dtype=dtype)
    assert big_err > atol + rtol * 0 and big_err <= atol + rtol * big
    assert big_err > rtol + atol * big, "the case must fail with rtol and atol swapped"
    outcome = checks.compare(got, ref, None, None)
    assert outcome.ok, outcome.message
    assert outcome.max_abs_err == pytest.approx(big_err)
    assert outcome.max_rel_err == pytest.approx(big_err / big)
    # the same absolute error one order of magnitude beyond rtol fails
    assert not checks.compare(got, ref, rtol / 10, atol).ok
    # small magnitude: the error at zero is beyond atol (and within rtol, were they swapped)
    zero = torch.zeros(3, dtype=dtype)
    off = torch.tensor([0.0, small_err, 0.0], dtype=dtype)
    assert atol < small_err <= rtol
    outcome = checks.compare(off, zero, None, None)
    assert (outcome.ok, outcome.reason) == (False, "mismatch")
    assert outcome.max_rel_err == math.inf
    assert "1 of 3 elements differ" in outcome.message
    assert f"rtol={rtol:g}, atol={atol:g}" in outcome.message
    # and with atol raised to the error it passes
    assert checks.compare(off, zero, rtol, small_err).ok


def test_fp8_and_exact_dtypes() -> None:
    assert checks.default_tolerances(torch.float8_e4m3fn) == (1.25e-1, 1e-2)
    assert checks.default_tolerances(torch.float8_e5m2) == (1.25e-1, 1e-2)
    for dtype in (torch.int8, torch.int32, torch.int64, torch.bool, torch.uint8):
        assert checks.default_tolerances(dtype) == (0.0, 0.0)


def test_the_bound_is_inclusive() -> None:
    ref = torch.zeros(2, dtype=torch.float64)
    at = torch.tensor([0.5, 0.0], dtype=torch.float64)
    assert checks.compare(at, ref, 0.0, 0.5).ok  # |diff| == atol: within
    assert not checks.compare(at + 1e-9, ref, 0.0, 0.5).ok
    one = torch.ones(2, dtype=torch.float64)
    assert checks.compare(one + at, one, 0.5, 0.0).ok  # |diff| == rtol x |ref|: within
    assert not checks.compare(one + at + 1e-9, one, 0.5, 0.0).ok


def test_an_explicit_zero_tolerance_is_used_not_the_default() -> None:
    ref = torch.ones(2)
    got = ref + 2**-14  # within float32's defaults (1e-5 + 1e-4 x 1)
    assert checks.compare(got, ref, None, None).ok
    assert not checks.compare(got, ref, 0.0, None).ok
    tiny = torch.full((2,), 2**-20)  # at zero: within the default atol 1e-5
    assert checks.compare(tiny, ref * 0, None, None).ok
    assert not checks.compare(tiny, ref * 0, None, 0.0).ok


def test_the_relative_error_is_against_the_baseline() -> None:
    outcome = checks.compare(torch.tensor([3.0]), torch.tensor([2.0]), 1.0, 0.0)
    assert outcome.ok and outcome.max_abs_err == 1.0 and outcome.max_rel_err == 0.5
    outcome = checks.compare(torch.tensor([-2.0]), torch.tensor([-4.0]), None, None)
    assert not outcome.ok
    assert (outcome.max_abs_err, outcome.max_rel_err) == (2.0, 0.5)


def test_errors_are_the_maximum_over_every_output() -> None:
    ref = (torch.tensor([1.0, 10.0]), {"k": torch.tensor([100.0])})
    got = (torch.tensor([1.5, 10.0]), {"k": torch.tensor([101.0])})
    outcome = checks.compare(got, ref, 1.0, 1.0)
    assert outcome.ok and outcome.message == "matches the baseline"
    assert (outcome.max_abs_err, outcome.max_rel_err) == (1.0, 0.5)
    bad = checks.compare(got, ref, 0.0, 0.0)
    assert bad.message == (
        "out[0]: 1 of 2 elements differ beyond rtol=0, atol=0 (max abs err 0.5, max rel err 0.5); "
        "out[1]['k']: 1 of 1 elements differ beyond rtol=0, atol=0 "
        "(max abs err 1, max rel err 0.01)"
    )
    assert (bad.max_abs_err, bad.max_rel_err) == (1.0, 0.5)


def test_zero_against_zero_has_no_relative_error_and_empty_tensors_none_at_all() -> None:
    outcome = checks.compare(torch.zeros(3), torch.zeros(3), 0.0, 0.0)
    assert (outcome.ok, outcome.max_abs_err, outcome.max_rel_err) == (True, 0.0, 0.0)
    empty = checks.compare(torch.zeros(0), torch.zeros(0), 0.0, 0.0)
    assert (empty.ok, empty.max_abs_err, empty.max_rel_err) == (True, 0.0, 0.0)


def test_booleans_compare_exactly() -> None:
    ref = torch.tensor([True, False])
    assert checks.compare(ref.clone(), ref, None, None).ok
    outcome = checks.compare(torch.tensor([True, True]), ref, None, None)
    assert (outcome.ok, outcome.max_abs_err) == (False, 1.0)


# --- structure --------------------------------------------------------------------------------


def test_paths_of_nested_outputs() -> None:
    x = torch.zeros(1)
    assert [p for p, _ in checks.flatten(x)] == ["out"]
    nested = (x, [x, {"a": x}], {"b": (x,)})
    assert [p for p, _ in checks.flatten(nested)] == [
        "out[0]",
        "out[1][0]",
        "out[1][1]['a']",
        "out[2]['b'][0]",
    ]
    with pytest.raises(TypeError, match="got int"):
        checks.flatten((x, 3))


def test_single_run_checks() -> None:
    assert checks.check_single(torch.ones(2)).reason == "ok"
    empty = checks.check_single(())
    assert (empty.ok, empty.reason, empty.message) == (
        False,
        "structure",
        "the entry returned no tensor",
    )
    wrong = checks.check_single(3.0)
    assert (wrong.ok, wrong.reason) == (False, "structure")
    assert "got float" in wrong.message


def test_a_non_tensor_reference_is_a_structure_error() -> None:
    outcome = checks.compare(torch.zeros(1), "x", None, None)
    assert (outcome.ok, outcome.reason) == (False, "structure")


def test_shape_is_checked_before_values_and_dtype() -> None:
    outcome = checks.compare(torch.zeros(2, dtype=torch.float64), torch.zeros(3), None, None)
    assert outcome.reason == "shape"


def test_outcome_as_a_dict() -> None:
    outcome = checks.compare(torch.ones(1), torch.ones(1), None, None)
    assert outcome.to_dict() == {
        "ok": True,
        "reason": "ok",
        "message": "matches the baseline",
        "max_abs_err": 0.0,
        "max_rel_err": 0.0,
    }
    assert frozenset({"shape", "dtype", "structure", "alias"}) == checks.STRUCTURAL


def test_storages_skip_empty_tensors() -> None:
    x = torch.zeros(4)
    assert checks.storages([x[:0]]) == set()
    assert len(checks.storages([x, x[1:], torch.zeros(1)])) == 2


def test_errors_are_computed_wide_enough() -> None:
    # in float16 the difference 60000 - (-60000) overflows; measured in float64 it does not
    outcome = checks.compare(
        torch.tensor([60000.0], dtype=torch.float16),
        torch.tensor([-60000.0], dtype=torch.float16),
        None,
        None,
    )
    assert outcome.max_abs_err == 120000.0 and outcome.max_rel_err == 2.0


def test_complex_outputs_compare_both_parts() -> None:
    ref = torch.tensor([1 + 1j], dtype=torch.complex64)
    outcome = checks.compare(torch.tensor([1 + 2j], dtype=torch.complex64), ref, None, None)
    assert (outcome.ok, outcome.max_abs_err) == (False, 1.0)


def test_the_relative_error_below_one() -> None:
    outcome = checks.compare(torch.tensor([0.75]), torch.tensor([0.5]), None, None)
    assert (outcome.max_abs_err, outcome.max_rel_err) == (0.25, 0.5)


def test_every_key_of_a_dict_is_kept() -> None:
    x, y = torch.zeros(1), torch.ones(1)
    assert [p for p, _ in checks.flatten({"a": x, "b": y})] == ["out['a']", "out['b']"]


def test_errors_in_chunks_equal_the_whole_comparison(monkeypatch: pytest.MonkeyPatch) -> None:
    """A big output is compared chunk by chunk (float64 temporaries of a whole 6 GiB output
    ran the H200 out of memory): the errors and the count do not depend on the chunk size,
    including a chunk that does not divide the size and the worst element in the last one."""
    gen = torch.Generator().manual_seed(5)
    want = torch.rand(3, 1001, generator=gen) + 0.5
    got = want.clone()
    got[0, 3] += 1e-3  # out of tolerance in the first chunk
    got[2, 1000] -= 0.25  # the largest error, in the last (short) chunk
    whole = checks.compare(got, want, 1e-4, 1e-5)
    monkeypatch.setattr(checks, "ERROR_CHUNK", 64)
    chunked = checks.compare(got, want, 1e-4, 1e-5)
    assert whole.to_dict() == chunked.to_dict()
    assert "2 of 3003 elements differ" in chunked.message
    assert chunked.max_abs_err == pytest.approx(0.25, rel=1e-6)
