"""Requests: what a tool, the CLI or a script asks the pipeline to profile (pydantic v2).

Everything a request holds ends up in a rendered harness or on an ncu command line, so the
validators refuse what could be mistaken for an option or is not a plain identifier.
"""

from __future__ import annotations

import itertools
import keyword
import math
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

import nsight_agent.kernelbench as kernelbench
import nsight_agent.source_shape as source_shape
from nsight_agent.options import MIN_TIMEOUT_S
from nsight_agent.options import TIME_METRIC as TIME_METRIC
from nsight_agent.options import CacheControl as CacheControl
from nsight_agent.options import ClockControl as ClockControl
from nsight_agent.options import ReplayMode as ReplayMode
from nsight_agent.time_basis import TimeBasis, default_basis

Language = Literal["triton", "torch", "torch_compile", "cuda"]
# What a request accepts: the tools' ``Language`` plus KernelBench's format, which the tools
# offer once their schemas use this type (the recorded tools/list changes with it).
RequestLanguage = Literal["triton", "torch", "torch_compile", "cuda", "kernelbench"]
Correctness = Literal["default", "kernelbench"]
CombineKernels = Literal["sum", "none"]

MAX_CONFIGS = 64
# The smallest change called faster or slower, in percent and, for times, in nanoseconds: on
# an H100 (bench/results/effect-size/2026-12-06-h100-80gb-hbm3-1f031cd.json, held_out: 40
# identical variants per size and method), identical variants moved by up to 1.38 % at
# 1.468 us timed and 5.57 % at 2.998 us under ncu, 0.40 % and 0.53 % near 60 us; the 95 %
# intervals alone called 3 of them faster or slower (up to 0.89 % at 13.17 us, 0.53 % at 61.93 us),
# this rule none: a jitter of tens to a few hundred ns at small sizes, a few tenths of a
# percent above; an agent would not act on less.
MIN_EFFECT_PCT = 3.0
MIN_EFFECT_NS = 100.0
"""Largest number of configurations one request may expand to (a grid is counted expanded)."""

RESERVED_CONFIG_KEYS = frozenset({"device"})

MAX_SOURCE_BYTES = 4 * 1024 * 1024
"""Largest source (module, variant or CUDA source) one request may carry, in UTF-8 bytes."""


def _check_source_size(kind: str, value: str | None) -> str | None:
    if value is None:
        return value
    size = len(value.encode("utf-8", errors="surrogatepass"))
    if size > MAX_SOURCE_BYTES:
        raise ValueError(
            f"{kind} is {size / 2**20:.1f} MiB; the limit is {MAX_SOURCE_BYTES // 2**20} MiB. "
            "Send the kernel and its entry points only (load large data in setup, from files)"
        )
    return value


KERNEL_CONTRACT_SUMMARY = (
    "Kernel contract (all languages): `source` is a Python module. It defines "
    "`setup(**config, device)` that builds the inputs of one configuration and returns them "
    "as a tuple (passed positionally), a dict (passed by keyword) or one tensor; and one or "
    "more entry points (default `run`) that launch the work to measure on those inputs and "
    "return its outputs (a tensor, or a tuple/list/dict of tensors). Only the entry call is "
    "profiled: setup and warm-up run outside the measured range. `configs` is a list of "
    "dicts, or a grid (dict of lists, expanded as a cartesian product), at most "
    f"{MAX_CONFIGS} configurations; keys are `setup`'s parameters. Each run rebuilds the "
    "inputs from a new seed; every variant's outputs are compared with the "
    "baseline's (NaN/Inf, shape or dtype differences fail). language='triton': entries launch "
    "@triton.jit kernels; 'torch': eager PyTorch; 'torch_compile': entries are wrapped in "
    "torch.compile and compiled during warm-up; 'cuda': `cuda_source` (or the module's "
    "CUDA_SOURCE string) is C++/CUDA compiled with torch's load_inline, `cuda_functions` (or "
    "CUDA_FUNCTIONS) are the C++ functions exposed, and each entry receives the compiled "
    "extension module as its first argument: `run(ext, *inputs)`. Entries must not keep "
    "state between calls or return cached results."
)


def _check_name(kind: str, value: str) -> str:
    if not value or not value.strip():
        raise ValueError(f"{kind} must be a non-empty string")
    if value.startswith("-"):
        raise ValueError(f"{kind} {value!r} starts with '-' and could be read as an option")
    if any(not c.isprintable() for c in value):
        raise ValueError(f"{kind} {value!r} contains control characters")
    return value


def _check_identifier(kind: str, value: str) -> str:
    if not value.isidentifier() or keyword.iskeyword(value):
        raise ValueError(f"{kind} {value!r} is not a Python identifier")
    return value


class Variant(BaseModel):
    """One implementation to measure: an entry point, in the request's source or its own."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Label of this variant in results (the NVTX annotation).")
    entry: str = Field("run", description="Function of the source module to measure.")
    source: str | None = Field(
        None, description="Python module source of this variant; None uses the request's."
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if len(v) > 64:
            raise ValueError(f"variant name {v!r} is longer than 64 characters")
        return _check_name("variant name", v)

    @field_validator("entry")
    @classmethod
    def _entry(cls, v: str) -> str:
        return _check_identifier("entry", v)

    @field_validator("source")
    @classmethod
    def _source(cls, v: str | None) -> str | None:
        return _check_source_size("variant source", v)


ConfigValue = int | float | str | bool | None


class ProfileRequest(BaseModel):
    """Kernel source + configurations + what to collect: one profiling run."""

    model_config = ConfigDict(extra="forbid")

    source: str = Field(description="Python module source following the kernel contract.")
    language: RequestLanguage = "triton"
    entry: str = Field("run", description="Entry point measured when no variants are given.")
    setup: str = Field("setup", description="Function that builds the inputs of one config.")
    variants: list[Variant] = Field(default_factory=list)
    baseline: str | None = Field(
        None, description="Variant whose outputs are the reference; default the first variant."
    )
    configs: list[dict[str, Any]] | dict[str, list[Any]] = Field(
        description="A list of dicts, or a grid (dict of lists) expanded as a cartesian product."
    )
    metrics: list[str] = Field(default_factory=lambda: [TIME_METRIC])
    sections: list[str] = Field(default_factory=list)
    # Counters ncu collects into the report for a reader of the report (diagnose), not read
    # into rows: a kernel without one is no error.
    report_counters: list[str] = Field(default_factory=list)
    # A profiling budget (engine/collection/budget.py): after the pre-flight counts each call's
    # kernels, the sections (most needed first; the first budget_keep always) that fit it.
    budget_s: float | None = Field(default=None, ge=1, le=3600)
    budget_keep: int = Field(default=0, ge=0)
    runs: int = Field(5, ge=1, le=100)
    warmup: int = Field(2, ge=0, le=100)
    replay_mode: ReplayMode = "kernel"
    cache_control: CacheControl = "all"
    clock_control: ClockControl = "none"
    timeout_s: float = Field(600.0, ge=MIN_TIMEOUT_S, le=24 * 3600)
    rtol: float | None = Field(None, ge=0)
    atol: float | None = Field(None, ge=0)
    seed: int = 0
    torch_ranges: bool = Field(
        False,
        description="Record torch operator ranges (emit_nvtx, with shapes) around the measured "
        "calls under ncu, so a step's kernels can be grouped by operator (diagnose_kernel)",
    )
    sample_launches: bool = Field(
        False,
        description="Under ncu, profile one launch per launch configuration (kernel, grid, "
        "block) and weigh it by the pre-flight's launches of that configuration: a step of "
        "repeated launches (an RNN, a deep network) costs its distinct configurations. One "
        "measured call only (one config, one variant, runs=1); diagnose_kernel's step view",
    )
    vary_inputs: bool = Field(
        True,
        description="Refill floating-point inputs from each run's seed when setup ignores it.",
    )
    min_effect_pct: float = Field(
        MIN_EFFECT_PCT,
        ge=0,
        le=100,
        description="faster/slower need separated 95% intervals and a change of at least this "
        "many percent; a smaller separated change is within_noise",
    )
    ignore_kernels: list[str] = Field(default_factory=list)
    combine_kernels: CombineKernels = "sum"
    cuda_source: str | None = None
    cuda_functions: list[str] = Field(default_factory=list)
    correctness: Correctness = Field(
        "default",
        description="'kernelbench' adds KernelBench's rule to our checks: 5 seeded trials per "
        "config, and its tolerances (atol = rtol: fp32 1e-4, fp16/bf16 1e-2) unless rtol/atol "
        "are given",
    )
    # What a verdict compares (nsight_agent/time_basis.py); None: the request's default.
    time_basis: TimeBasis | None = None
    # correctness="kernelbench": its correctness trials per config, timed trials per variant
    num_correct_trials: int = Field(kernelbench.TRIALS, ge=1, le=100)
    num_perf_trials: int = Field(kernelbench.PERF_TRIALS, ge=1, le=10_000)

    @model_validator(mode="before")
    @classmethod
    def _detect_language(cls, data: Any) -> Any:
        """A language left out (or None) is the source's own (``source_shape.detect_language``:
        'kernelbench' for a KernelBench problem, 'cuda' for a source with C++/CUDA), else the
        default; KernelBench's configs default to the problem's own sizes, one config ``[{}]``."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if data.get("language") is None:
            data.pop("language", None)
            source, cuda = data.get("source"), data.get("cuda_source")
            if isinstance(source, str):
                found = source_shape.detect_language(
                    source, cuda if isinstance(cuda, str) else None
                )
                data.update({"language": found} if found else {})
        if data.get("configs") is None:  # None: its field's check says what to give
            data["configs"] = [{}] if data.get("language") == "kernelbench" else None
        return data

    @model_validator(mode="after")
    def _kernelbench(self) -> ProfileRequest:
        """KernelBench's roles: the problem's ``Model`` is variant "ref" when none is given,
        a variant with its own source measures its ``ModelNew``; configs override module
        constants by name. Checked here so a mistake costs no run."""
        if self.language != "kernelbench":
            return self
        if not self.variants:
            self.variants = [Variant(name="ref", entry=kernelbench.PROBLEM_CLASS, source=None)]
        for v in self.variants:
            own = v.source is not None and v.source != self.source
            text = v.source if v.source is not None and own else self.source
            if "entry" not in v.model_fields_set:
                v.entry = kernelbench.CANDIDATE_CLASS if own else kernelbench.PROBLEM_CLASS
            tree = source_shape.read(text)
            if isinstance(tree, source_shape.Unparsable) or not source_shape.binds(tree, v.entry):
                whose = "its own source" if own else "the problem's source"
                raise ValueError(f"variant {v.name!r}: {whose} defines no class {v.entry!r}")
        if not kernelbench.is_kernelbench(self.source):
            raise ValueError(
                "language 'kernelbench' needs a problem source: class Model and get_inputs() "
                "(get_init_inputs() if Model takes arguments) at module level, and no setup()"
            )
        constants = kernelbench.module_constants(self.source)
        unknown = sorted(set(self.param_names()) - set(constants))
        if unknown:
            raise ValueError(
                f"config keys {unknown} are not module constants of the problem; a config "
                f"overrides them by name: {', '.join(constants) or 'it has none'}"
            )
        return self

    @field_validator("entry", "setup")
    @classmethod
    def _identifiers(cls, v: str) -> str:
        return _check_identifier("function name", v)

    @field_validator("source", "cuda_source")
    @classmethod
    def _sources(cls, v: str | None) -> str | None:
        return _check_source_size("source", v)

    @field_validator("cuda_functions")
    @classmethod
    def _cuda_functions(cls, v: list[str]) -> list[str]:
        return [_check_identifier("cuda function", f) for f in v]

    @field_validator("metrics", "sections", "ignore_kernels", "report_counters")
    @classmethod
    def _names(cls, v: list[str]) -> list[str]:
        for item in v:
            _check_name("name", item)
            if "," in item:
                raise ValueError(f"{item!r}: give one name per list entry (no commas)")
        return v

    @field_validator("configs", mode="before")
    @classmethod
    def _configs_given(cls, v: Any) -> Any:
        if v is None:
            raise ValueError(
                'configs is required: a list of dicts or a grid {"n": [1024]} (only a '
                "KernelBench problem, with Model and get_inputs, may leave it out)"
            )
        return v

    @field_validator("configs")
    @classmethod
    def _configs(
        cls, v: list[dict[str, Any]] | dict[str, list[Any]]
    ) -> list[dict[str, Any]] | dict[str, list[Any]]:
        expand_configs(v)  # raises ValueError with the reason
        return v

    @model_validator(mode="after")
    def _variants(self) -> ProfileRequest:
        names = [v.name for v in self.effective_variants()]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"variant names must be unique; repeated: {', '.join(dupes)}")
        if self.baseline is not None and self.baseline not in names:
            raise ValueError(
                f"baseline {self.baseline!r} is not a variant name (variants: {', '.join(names)})"
            )
        if not self.metrics and not self.sections:
            raise ValueError("ask for at least one metric or section")
        if self.sample_launches and not self.one_measured_call():
            raise ValueError(
                "sample_launches weighs one measured call by its pre-flight: give one config, "
                "one variant and runs=1, or leave sample_launches off"
            )
        return self

    def one_measured_call(self) -> bool:
        """Whether the harness measures exactly one call (what launch sampling maps)."""
        return (
            self.runs == 1
            and len(self.effective_variants()) == 1
            and len(self.expanded_configs()) == 1
        )

    def expanded_configs(self) -> list[dict[str, Any]]:
        """The configurations, a grid expanded (key order kept, last key varying fastest)."""
        return expand_configs(self.configs)

    def sources(self) -> list[str]:
        """The texts of the request's modules: the shared source, then each variant's own."""
        return [self.source, *(v.source for v in self.variants if v.source is not None)]

    def effective_variants(self) -> list[Variant]:
        """The variants measured: the given ones, or one named after ``entry``."""
        return list(self.variants) or [Variant(name=self.entry, entry=self.entry, source=None)]

    def baseline_name(self) -> str:
        return self.baseline or self.effective_variants()[0].name

    def basis(self) -> TimeBasis:
        """The time basis its comparison reads: the one asked for, else the default."""
        return self.time_basis or default_basis(self.correctness)

    def param_names(self) -> list[str]:
        configs = self.expanded_configs()
        return list(configs[0]) if configs else []


def expand_configs(configs: list[dict[str, Any]] | dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Validate and expand ``configs``; raises ``ValueError`` saying what is wrong."""
    if isinstance(configs, dict):
        if not configs:
            raise ValueError(
                "configs is an empty grid {}: give at least one parameter with its values, "
                'e.g. {"n": [1024]}, or a list of configs'
            )
        for key, values in configs.items():
            if not isinstance(values, list) or not values:
                raise ValueError(f"grid entry {key!r} must be a non-empty list of values")
        size = math.prod(len(v) for v in configs.values())
        if size > MAX_CONFIGS:
            raise ValueError(
                f"the grid expands to {size} configurations; the limit is {MAX_CONFIGS}. "
                "Sweep fewer values per key, or split the sweep into several requests."
            )
        keys = list(configs)
        expanded = [dict(zip(keys, combo)) for combo in itertools.product(*configs.values())]
    else:
        expanded = [dict(c) for c in configs]
    if not expanded:
        raise ValueError("configs is empty: give at least one configuration")
    if len(expanded) > MAX_CONFIGS:
        raise ValueError(f"{len(expanded)} configurations given; the limit is {MAX_CONFIGS}")
    keys0 = list(expanded[0])
    for i, config in enumerate(expanded):
        if list(config) != keys0 and set(config) != set(keys0):
            raise ValueError(
                f"config #{i} has keys {sorted(config)} but config #0 has {sorted(keys0)}; "
                "every config must give the same parameters"
            )
        for key, value in config.items():
            _check_identifier("config key", key)
            if key in RESERVED_CONFIG_KEYS:
                raise ValueError(f"config key {key!r} is reserved: the harness passes it")
            if not isinstance(value, ConfigValue):
                raise ValueError(
                    f"config #{i} {key}={value!r}: values must be numbers, strings, booleans or "
                    "null (build tensors and dtypes inside setup)"
                )
            if isinstance(value, str):
                _check_name(f"config value of {key}", value)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"config #{i} {key}={value!r} is not finite")
    return [{k: c[k] for k in keys0} for c in expanded]
