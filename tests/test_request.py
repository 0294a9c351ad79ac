"""ProfileRequest validation: grids, limits, names, and what may reach a harness or ncu."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from nsight_agent.request import (
    KERNEL_CONTRACT_SUMMARY,
    MAX_CONFIGS,
    ProfileRequest,
    Variant,
    expand_configs,
)

SRC = "def setup(n, device):\n    return ()\n\ndef run():\n    return None\n"


def make(**kwargs: object) -> ProfileRequest:
    fields: dict[str, object] = {"source": SRC, "configs": [{"n": 1}]}
    fields.update(kwargs)
    return ProfileRequest.model_validate(fields)


def test_grid_expands_as_cartesian_product_in_key_order() -> None:
    req = make(configs={"n": [1, 2], "dtype": ["float16", "float32"]})
    assert req.expanded_configs() == [
        {"n": 1, "dtype": "float16"},
        {"n": 1, "dtype": "float32"},
        {"n": 2, "dtype": "float16"},
        {"n": 2, "dtype": "float32"},
    ]
    assert req.param_names() == ["n", "dtype"]


def test_list_of_configs_is_kept_in_order_with_first_key_order() -> None:
    req = make(configs=[{"a": 1, "b": 2}, {"b": 4, "a": 3}])
    assert req.expanded_configs() == [{"a": 1, "b": 2}, {"a": 3, "b": 4}]


def test_grid_over_the_limit_is_refused_with_the_size() -> None:
    with pytest.raises(ValidationError, match=rf"expands to {MAX_CONFIGS * 2} configurations"):
        make(configs={"a": list(range(MAX_CONFIGS)), "b": [0, 1]})
    assert len(expand_configs({"a": list(range(MAX_CONFIGS))})) == MAX_CONFIGS


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        ([], "configs is empty"),
        ({"n": []}, "non-empty list"),
        ([{"n": 1}, {"m": 2}], "same parameters"),
        ([{"not-an-id": 1}], "not a Python identifier"),
        ([{"class": 1}], "not a Python identifier"),
        ([{"device": "cuda"}], "reserved"),
        ([{"n": "--help"}], "could be read as an option"),
        ([{"n": [1, 2]}], "values must be numbers"),
        ([{"n": float("nan")}], "not finite"),
    ],
)
def test_bad_configs_are_refused(configs: object, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        make(configs=configs)


def test_effective_variants_default_to_one_named_after_the_entry() -> None:
    req = make(entry="my_kernel")
    assert [(v.name, v.entry, v.source) for v in req.effective_variants()] == [
        ("my_kernel", "my_kernel", None)
    ]
    assert req.baseline_name() == "my_kernel"


def test_baseline_defaults_to_first_variant_and_must_name_one() -> None:
    variants = [Variant(name="ref", entry="a", source=None), Variant(name="new", entry="b")]
    assert make(variants=variants).baseline_name() == "ref"
    assert make(variants=variants, baseline="new").baseline_name() == "new"
    with pytest.raises(ValidationError, match="baseline 'other' is not a variant name"):
        make(variants=variants, baseline="other")


def test_variant_names_must_be_unique() -> None:
    with pytest.raises(ValidationError, match="repeated: x"):
        make(variants=[Variant(name="x", entry="a"), Variant(name="x", entry="b")])


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("entry", "run()", "not a Python identifier"),
        ("setup", "import", "not a Python identifier"),
        ("metrics", ["--set=full"], "could be read as an option"),
        ("metrics", ["a,b"], "one name per list entry"),
        ("sections", ["-x"], "could be read as an option"),
        ("ignore_kernels", [""], "non-empty"),
        ("cuda_functions", ["f(x)"], "not a Python identifier"),
        ("runs", 0, "greater than or equal to 1"),
        ("runs", 101, "less than or equal to 100"),
        ("language", "jax", "triton"),
        ("replay_mode", "application", "kernel"),
    ],
)
def test_bad_fields_are_refused(field: str, value: object, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        make(**{field: value})


def test_variant_name_may_not_look_like_an_option_or_be_too_long() -> None:
    with pytest.raises(ValidationError, match="option"):
        Variant(name="-v")
    with pytest.raises(ValidationError, match="longer than 64"):
        Variant(name="v" * 65)


def test_unknown_fields_are_refused() -> None:
    with pytest.raises(ValidationError, match="extra"):
        make(cofigs={"n": [1]})


def test_request_round_trips_through_json() -> None:
    req = make(
        configs={"n": [1, 2]}, variants=[Variant(name="a"), Variant(name="b", entry="other")]
    )
    again = ProfileRequest.model_validate_json(req.model_dump_json())
    assert again == req
    assert again.expanded_configs() == [{"n": 1}, {"n": 2}]


def test_contract_summary_names_the_functions_and_the_limit() -> None:
    for needle in ("setup(**config, device)", "run(ext, *inputs)", str(MAX_CONFIGS), "baseline"):
        assert needle in KERNEL_CONTRACT_SUMMARY
