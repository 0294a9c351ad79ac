"""request.py held at its edges: control characters in names, empty metrics and sections, the
source size limit to the byte, config expansion sizes (hypothesis), the limits' exact numbers."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from nsight_agent.arguments import validation_text
from nsight_agent.request import (
    MAX_CONFIGS,
    MAX_SOURCE_BYTES,
    ProfileRequest,
    Variant,
    expand_configs,
)

# no example database in the checkout; no deadline on a loaded two-core machine
PROPERTY = settings(database=None, deadline=None)

SRC = "def setup(n, device):\n    return ()\n\ndef run():\n    return None\n"


def make(**kwargs: object) -> ProfileRequest:
    fields: dict[str, object] = {"source": SRC, "configs": [{"n": 1}]}
    fields.update(kwargs)
    return ProfileRequest.model_validate(fields)


# --- names ------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["a\nb", "a\tb", "a\x00", "\x1b[31mred", "a\x7fb", "a\u2028b"])
@pytest.mark.parametrize("field", ["metrics", "sections", "ignore_kernels"])
def test_control_characters_in_names_are_refused(field: str, bad: str) -> None:
    with pytest.raises(ValidationError, match="contains control characters"):
        make(**{field: [bad]})


@pytest.mark.parametrize("bad", ["a\nb", "x\x00"])
def test_control_characters_in_variant_names_and_config_values_are_refused(bad: str) -> None:
    with pytest.raises(ValidationError, match=r"variant name .* contains control characters"):
        Variant(name=bad)
    with pytest.raises(ValidationError, match=r"config value of n .* contains control characters"):
        make(configs=[{"n": bad}])


@pytest.mark.parametrize("blank", ["", " ", "\t"])
def test_blank_names_are_refused(blank: str) -> None:
    with pytest.raises(ValidationError, match="name must be a non-empty string"):
        make(metrics=[blank])
    with pytest.raises(ValidationError, match="variant name must be a non-empty string"):
        Variant(name=blank)


def test_printable_names_pass_unchanged() -> None:
    req = make(
        metrics=["sm__throughput.avg.pct_of_peak_sustained_elapsed"],
        sections=["SpeedOfLight"],
        ignore_kernels=["elementwise kernel <float>"],
        configs=[{"n": "a b-c"}],
    )
    assert req.ignore_kernels == ["elementwise kernel <float>"]
    assert req.expanded_configs() == [{"n": "a b-c"}]
    assert Variant(name="v-1 (fast)").name == "v-1 (fast)"
    assert Variant(name="x" * 64).name == "x" * 64


def test_a_name_may_hold_a_dash_after_the_first_character_but_no_comma() -> None:
    assert make(sections=["a-b"]).sections == ["a-b"]
    with pytest.raises(ValidationError, match="'a,b': give one name per list entry"):
        make(sections=["a,b"])
    with pytest.raises(ValidationError, match="'k,x': give one name per list entry"):
        make(ignore_kernels=["k,x"])


# --- metrics and sections ---------------------------------------------------------------------


def test_empty_metrics_and_sections_are_refused() -> None:
    with pytest.raises(ValidationError, match="ask for at least one metric or section"):
        make(metrics=[], sections=[])


def test_either_metrics_or_sections_alone_is_enough() -> None:
    assert make(metrics=[], sections=["SpeedOfLight"]).metrics == []
    assert make(metrics=["dram__bytes.sum"]).sections == []
    assert make().metrics == ["gpu__time_duration.sum"]


# --- the source size limit --------------------------------------------------------------------


def _source(size: int, fill: str = "#") -> str:
    return SRC + fill * ((size - len(SRC)) // len(fill.encode()))


def test_the_source_limit_is_in_utf8_bytes_to_the_byte() -> None:
    assert MAX_SOURCE_BYTES == 4 * 1024 * 1024
    at_limit = _source(MAX_SOURCE_BYTES)
    assert len(at_limit.encode()) == MAX_SOURCE_BYTES
    assert make(source=at_limit).source == at_limit
    with pytest.raises(ValidationError, match=r"source is 4\.0 MiB; the limit is 4 MiB"):
        make(source=at_limit + "#")
    # two bytes a character: half as many characters reach the limit
    wide = SRC + "é" * ((MAX_SOURCE_BYTES - len(SRC)) // 2 + 1)
    assert len(wide) < MAX_SOURCE_BYTES < len(wide.encode())
    with pytest.raises(ValidationError, match="source is"):
        make(source=wide)


@pytest.mark.parametrize("field", ["cuda_source", "variant source"])
def test_every_source_field_has_the_limit(field: str) -> None:
    over = _source(MAX_SOURCE_BYTES) + "#"
    if field == "variant source":
        assert Variant(name="v", source=_source(MAX_SOURCE_BYTES)).source is not None
        with pytest.raises(ValidationError, match=r"variant source is 4\.0 MiB"):
            Variant(name="v", source=over)
        assert Variant(name="v", source=None).source is None
    else:
        with pytest.raises(ValidationError, match=r"source is 4\.0 MiB; the limit is 4 MiB"):
            make(cuda_source=over)
        assert make(cuda_source=None).cuda_source is None


# --- config expansion -------------------------------------------------------------------------

grid = st.dictionaries(
    st.sampled_from(["a", "b", "c", "n", "dtype"]),
    st.lists(st.integers(-5, 5), min_size=1, max_size=2),
    min_size=1,
)


@PROPERTY
@given(grid)
def test_a_grid_expands_to_the_product_of_its_lengths(g: dict[str, list[int]]) -> None:
    size = math.prod(len(v) for v in g.values())
    expanded = expand_configs(g)
    assert len(expanded) == size <= MAX_CONFIGS
    assert all(list(c) == list(g) for c in expanded)
    # the last key varies fastest
    last = list(g)[-1]
    assert [c[last] for c in expanded[: len(g[last])]] == g[last]
    for key, values in g.items():
        assert {c[key] for c in expanded} == set(values)


@PROPERTY
@given(st.lists(st.integers(1, 9), min_size=1, max_size=6))
def test_a_grid_over_the_limit_is_refused_and_at_the_limit_accepted(lengths: list[int]) -> None:
    g = {f"k{i}": list(range(n)) for i, n in enumerate(lengths)}
    size = math.prod(lengths)
    if size > MAX_CONFIGS:
        with pytest.raises(ValueError, match=f"expands to {size} configurations"):
            expand_configs(g)
    else:
        assert len(expand_configs(g)) == size


def test_the_config_limit_to_the_config() -> None:
    assert MAX_CONFIGS == 64
    assert len(expand_configs([{"n": i} for i in range(MAX_CONFIGS)])) == MAX_CONFIGS
    with pytest.raises(ValueError, match="65 configurations given; the limit is 64"):
        expand_configs([{"n": i} for i in range(MAX_CONFIGS + 1)])
    assert len(expand_configs({"a": list(range(8)), "b": list(range(8))})) == 64
    with pytest.raises(ValueError, match="expands to 72 configurations"):
        expand_configs({"a": list(range(8)), "b": list(range(9))})


def test_an_empty_grid_and_a_grid_value_that_is_not_a_list_are_refused() -> None:
    with pytest.raises(ValueError, match="empty grid"):
        expand_configs({})
    with pytest.raises(ValueError, match="grid entry 'n' must be a non-empty list"):
        expand_configs({"n": 3})  # type: ignore[dict-item]


def test_configs_in_another_key_order_are_reordered_like_the_first() -> None:
    out = expand_configs([{"a": 1, "b": 2}, {"b": 4, "a": 3}])
    assert [list(c) for c in out] == [["a", "b"], ["a", "b"]]
    assert out == [{"a": 1, "b": 2}, {"a": 3, "b": 4}]
    with pytest.raises(ValueError, match=r"config #1 has keys \['a'\] but config #0"):
        expand_configs([{"a": 1, "b": 2}, {"a": 3}])


@pytest.mark.parametrize("value", [None, True, 0, -1.5, "fp16"])
def test_plain_config_values_pass(value: object) -> None:
    assert expand_configs([{"x": value}]) == [{"x": value}]


@pytest.mark.parametrize("value", [math.inf, -math.inf])
def test_infinite_config_values_are_refused(value: float) -> None:
    with pytest.raises(ValueError, match=r"config #0 x=.*inf is not finite"):
        expand_configs([{"x": value}])


def test_config_errors_name_the_config() -> None:
    with pytest.raises(ValueError, match=r"config #1 x=\[1\]: values must be numbers"):
        expand_configs([{"x": 1}, {"x": [1]}])


# --- the request's other rules ----------------------------------------------------------------


def test_param_names_and_baseline() -> None:
    req = make(configs={"m": [1, 2], "n": [3]})
    assert req.param_names() == ["m", "n"]
    assert req.expanded_configs() == [{"m": 1, "n": 3}, {"m": 2, "n": 3}]
    assert req.baseline_name() == "run"


def test_duplicates_are_listed_sorted_once() -> None:
    variants = [Variant(name=n, entry="run") for n in ("b", "a", "b", "a", "c")]
    with pytest.raises(ValidationError, match=r"repeated: a, b \[type"):
        make(variants=variants)


def test_tolerances_and_timeouts_have_their_bounds() -> None:
    assert make(rtol=0.0, atol=0.0).rtol == 0.0
    with pytest.raises(ValidationError):
        make(rtol=-1e-9)
    with pytest.raises(ValidationError):
        make(timeout_s=0)
    assert make(timeout_s=24 * 3600).timeout_s == 24 * 3600
    with pytest.raises(ValidationError):
        make(timeout_s=24 * 3600 + 1)
    assert make(warmup=0).warmup == 0


def test_validation_text_is_one_line_with_at_most_eight_errors() -> None:
    with pytest.raises(ValidationError) as info:
        ProfileRequest.model_validate({f"x{i}": 1 for i in range(10)})
    text, hint = validation_text(info.value).split("\n")
    assert text.startswith("Malformed request: ")
    assert text.count(";") == 7
    assert text.endswith(f"(+{info.value.error_count() - 8} more)")
    assert "source: is required" in text and hint.startswith("Hint: ")
    with pytest.raises(ValidationError) as one:
        make(runs=0)
    assert validation_text(one.value) == (
        "Malformed request: runs: must be greater than or equal to 1\n"
        "Hint: Correct each field named; the others were accepted."
    )


# --- the messages a model acts on, in full ----------------------------------------------------


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        (
            {},
            'configs is an empty grid {}: give at least one parameter with its values, e.g. {"n": '
            "[1024]}, or a list of configs",
        ),
        (
            {"a": list(range(9)), "b": list(range(8))},
            "the grid expands to 72 configurations; the limit is 64. Sweep fewer values per key, "
            "or split the sweep into several requests.",
        ),
        ([], "configs is empty: give at least one configuration"),
        (
            [{"a": 1}, {"b": 2}],
            "config #1 has keys ['b'] but config #0 has ['a']; every config must give the same "
            "parameters",
        ),
        ([{"not-an-id": 1}], "config key 'not-an-id' is not a Python identifier"),
        (
            [{"x": (1,)}],
            "config #0 x=(1,): values must be numbers, strings, booleans or null (build tensors "
            "and dtypes inside setup)",
        ),
    ],
)
def test_config_messages_in_full(configs: object, message: str) -> None:
    with pytest.raises(ValueError) as info:
        expand_configs(configs)  # type: ignore[arg-type]
    assert str(info.value) == message


def test_the_source_message_in_full() -> None:
    with pytest.raises(ValidationError) as info:
        make(source="#" * (MAX_SOURCE_BYTES + 1))
    assert validation_text(info.value).split("\n")[0] == (
        "Malformed request: source: source is 4.0 MiB; the limit is 4 MiB. Send the "
        "kernel and its entry points only (load large data in setup, from files)"
    )


def test_validation_text_paths_and_the_eight_error_cut() -> None:
    with pytest.raises(ValidationError) as nested:
        make(variants=[{"name": "-x"}])
    assert validation_text(nested.value).startswith("Malformed request: variants.0.name: ")
    with pytest.raises(ValidationError) as whole:
        make(metrics=[], sections=[])
    assert validation_text(whole.value).split("\n")[0] == (
        "Malformed request: request: ask for at least one metric or section"
    )
    for n, tail in ((8, ""), (9, " (+1 more)")):
        with pytest.raises(ValidationError) as info:
            make(**{f"extra{i}": 1 for i in range(n)})
        text = validation_text(info.value).split("\n")[0]
        assert info.value.error_count() == n and text.endswith(f"is not allowed here{tail}")
        assert text.count("; ") == 7


def test_param_names_of_a_single_config() -> None:
    assert make(configs=[{"n": 1, "m": 2}]).param_names() == ["n", "m"]


def test_validation_text_joins_errors_with_a_semicolon() -> None:
    with pytest.raises(ValidationError) as info:
        make(runs=0, warmup=-1)
    assert validation_text(info.value).split("\n")[0] == (
        "Malformed request: runs: must be greater than or equal to 1; "
        "warmup: must be greater than or equal to 0"
    )
