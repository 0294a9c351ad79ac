"""The requests of the conformance matrix (``tests/test_conformance.py``) and the one answer
each must get on every front end.

A ``Case`` is one request: its sources, variants and fields, which front ends can say it
(``fronts``: the MCP tool, the CLI, the Python API), and per method what it must get here
(``Expect``): ``rejected`` with the problems' codes, ``environment`` (``ncu``: ncu is not on
this machine; ``gpu``: a CUDA source on a machine without one), ``source_error`` (the run
failed, at a stage) or ``measured`` with each variant's verdict key (``measured_ok`` for any
speed verdict, CPU timing being noise; ``incorrect:<why>``, ``error@<stage>:<line>``).

Sizes are small: every measured request times a few microseconds a call on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

KERNELBENCH = Path(__file__).parent / "fixtures" / "kernelbench"

Kind = Literal["profile", "compare", "diagnose", "roofline"]
Front = Literal["api", "mcp", "cli"]
Method = Literal["timing", "ncu"]
ALL_FRONTS: frozenset[Front] = frozenset({"api", "mcp", "cli"})
NCU_HERE = "ncu"  # the environment answer where ncu is not installed


@dataclass(frozen=True)
class Expect:
    """What a request must get: its class and key (codes for ``rejected``, the reason for
    ``environment``, the stage for ``source_error``, variant -> verdict key for ``measured``);
    ``also``: other keys a variant may get (a CUDA build fails at import on a CPU machine, at
    compile on a GPU one)."""

    cls: Literal["rejected", "environment", "source_error", "measured"]
    key: Any = None
    also: dict[str, frozenset[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class V:
    """A variant: an entry of the shared source, or a source of its own (``own``: written to
    ``<name>.py`` for the CLI's ``--candidate``; its entry then is the language's default)."""

    name: str
    entry: str | None = None
    own: str | None = None


@dataclass(frozen=True)
class Case:
    name: str
    kind: Kind
    source: str
    expect: dict[Method, Expect]
    variants: tuple[V, ...] = ()
    entry: str = "run"
    configs: list[dict[str, Any]] | None = field(default_factory=lambda: [{"n": 64}])
    language: str | None = "torch"
    fields: dict[str, Any] = field(default_factory=dict)  # the request's other fields
    fronts: frozenset[Front] = ALL_FRONTS

    @property
    def methods(self) -> tuple[Method, ...]:
        return tuple(self.expect)


TORCH = """import torch


def setup(n, device):
    return (torch.randn(n, device=device),)


def run(x):
    return x * 2


def run_new(x):
    return x + x


def run_raises(x):
    raise ValueError("the entry raised")


def run_str(x):
    return "a string"


def run_none(x):
    x * 2


def run_nan(x):
    return x * float("nan")


def run_inf(x):
    return x * float("inf")


def run_shape(x):
    return (x * 2)[:-1]


def run_dtype(x):
    return (x * 2).double()
"""
RAISES_LINE = 17  # run_raises's raise, in TORCH

TRITON = """import torch
import triton
import triton.language as tl


@triton.jit
def double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


def setup(n, device):
    return (torch.randn(n, device=device),)


def reference(x):
    return x * 2


def run(x):
    out = torch.empty_like(x)
    double_kernel[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), BLOCK=64)
    return out
"""

# A candidate of its own, following the contract (its entry is the default, run).
OWN_BROKEN = "import torch\n\n\ndef run(x)\n    return x * 3\n"
OWN_BROKEN_LINE = 4
SHARED_BROKEN = TORCH.replace("def run_new(x):", "def run_new(x)")
SHARED_BROKEN_LINE = 12

CUDA_DETECTED = '''import torch

CUDA_SOURCE = """
torch::Tensor twice(torch::Tensor x) { return x * 2; }
"""
CUDA_FUNCTIONS = ["twice"]


def setup(n, device):
    return (torch.randn(n, device=device),)


def run(ext, x):
    return ext.twice(x)
'''
NO_SETUP = "import torch\n\n\ndef run(x):\n    return x * 2\n"


def kernelbench(name: str) -> str:
    return (KERNELBENCH / f"{name}.py").read_text()


PROBLEM = kernelbench("problem_linear_relu")
HONEST = kernelbench("new_honest")
RAISES_AT_IMPORT = HONEST.replace(
    "\n\nclass ModelNew", '\n\nraise RuntimeError("no import")\n\n\nclass ModelNew'
)
RAISES_AT_IMPORT_LINE = 5
KB_SYNTAX = HONEST.replace("def forward(self, x):", "def forward(self, x)")
KB_SYNTAX_LINE = 12
NO_MODELNEW = HONEST.replace("class ModelNew", "class Other")
# Built, then its constructor raised: KernelBench's compiled=True, correctness=False.
INIT_RAISES = HONEST.replace(
    "        super().__init__()\n",
    '        super().__init__()\n        raise RuntimeError("no model")\n',
)
INIT_RAISES_LINE = 10
CUDA_BROKEN = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = """
__global__ void relu_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x
    if (i < n) y[i] = x[i] > 0 ? x[i] : 0;
}
torch::Tensor relu(torch::Tensor x) { return x; }
"""
ext = load_inline(
    name="conformance_broken_relu",
    cpp_sources="torch::Tensor relu(torch::Tensor x);",
    cuda_sources=CUDA_SRC,
    functions=["relu"],
)


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x):
        return ext.relu(self.linear(x))
'''
KB_PROBLEM_ONLY = PROBLEM.replace("def get_inputs():", "def make_inputs():")
# Model(features) with nothing to give it features: Model() alone would fail at its first call
KB_NO_INIT_INPUTS = PROBLEM.replace("def get_init_inputs():", "def init_inputs():")

ENV = Expect("environment", NCU_HERE)
OK = "measured_ok"


def rejected(*codes: str) -> Expect:
    return Expect("rejected", tuple(sorted(codes)))


def both(expect: Expect) -> dict[Method, Expect]:
    """A judgement that needs nothing of the machine: the same under either method."""
    return {"timing": expect, "ncu": expect}


def measured(
    key: dict[str, str], also: dict[str, frozenset[str]] | None = None
) -> dict[Method, Expect]:
    """Measured by timing here; under ncu (not on this machine), its environment answer."""
    return {"timing": Expect("measured", key, also or {}), "ncu": ENV}


def timing_refuses(*codes: str, ncu: Expect = ENV) -> dict[Method, Expect]:
    return {"timing": rejected(*codes), "ncu": ncu}


NOT_CLI = frozenset({"api", "mcp"})
WRONG = ("str", "none", "nan", "inf", "shape", "dtype")

CASES: list[Case] = [
    # --- measured ----------------------------------------------------------------------------
    Case(
        "good_torch",
        "compare",
        TORCH,
        measured({"ref": "baseline", "new": OK}),
        variants=(V("ref", "run"), V("new", "run_new")),
    ),
    Case(
        "good_triton",
        "compare",
        TRITON,
        measured({"torch": "baseline", "triton": OK}),
        variants=(V("torch", "reference"), V("triton", "run")),
        language="triton",
    ),
    Case("good_profile", "profile", TORCH, measured({"run": OK})),
    Case(
        "kb_honest",
        "compare",
        PROBLEM,
        measured({"ref": "baseline", "new_honest": OK}),
        variants=(V("ref"), V("new_honest", own=HONEST)),
        configs=None,
        language=None,
    ),
    Case(
        "kb_candidates",
        "compare",
        PROBLEM,
        measured(
            {
                "ref": "baseline",
                "new_honest": OK,
                "new_zeroes_input": "incorrect:values",
                "new_raises": "error@entry:10",
                "init_raises": f"error@entry:{INIT_RAISES_LINE}",
                "raises_at_import": f"error@import:{RAISES_AT_IMPORT_LINE}",
                "kb_syntax": f"error@import:{KB_SYNTAX_LINE}",
                "no_modelnew": "error@import:",
                "cuda_broken": "error@import:",
            },
            also={"cuda_broken": frozenset({"error@compile:"})},
        ),
        variants=(
            V("ref"),
            V("new_honest", own=HONEST),
            V("new_zeroes_input", own=kernelbench("new_zeroes_input")),
            V("new_raises", own=kernelbench("new_raises")),
            V("init_raises", own=INIT_RAISES),
            V("raises_at_import", own=RAISES_AT_IMPORT),
            V("kb_syntax", own=KB_SYNTAX),
            V("no_modelnew", own=NO_MODELNEW),
            V("cuda_broken", own=CUDA_BROKEN),
        ),
        configs=None,
        language=None,
        fields={"correctness": "kernelbench"},
    ),
    Case(
        "wrong_outputs",
        "compare",
        TORCH,
        measured(
            {"ref": "baseline"}
            | {w: f"incorrect:{'structure' if w in ('str', 'none') else w}" for w in WRONG}
        ),
        variants=(V("ref", "run"), *(V(w, f"run_{w}") for w in WRONG)),
    ),
    Case(
        "entry_raises",
        "compare",
        TORCH,
        measured({"ref": "baseline", "raises": f"error@entry:{RAISES_LINE}"}),
        variants=(V("ref", "run"), V("raises", "run_raises")),
    ),
    Case(
        "candidate_syntax_dropped",
        "compare",
        TORCH,
        measured({"ref": "baseline", "new": OK, "broken": f"error@import:{OWN_BROKEN_LINE}"}),
        variants=(V("ref", "run"), V("new", "run_new"), V("broken", own=OWN_BROKEN)),
    ),
    *(
        Case(
            f"baseline_{w}",
            "profile",
            TORCH,
            {"timing": Expect("source_error", "check"), "ncu": ENV},
            entry=f"run_{w}",
        )
        for w in ("str", "none", "nan", "inf")
    ),
    # --- rejected before anything runs --------------------------------------------------------
    Case(
        "shared_syntax",
        "compare",
        SHARED_BROKEN,
        both(rejected("syntax")),
        variants=(V("ref", "run"), V("new", "run_new")),
    ),
    Case(
        "candidate_syntax_alone",
        "compare",
        TORCH,
        both(rejected("syntax")),
        variants=(V("ref", "run"), V("broken", own=OWN_BROKEN)),
    ),
    Case(
        "kb_candidate_without_modelnew",
        "compare",
        PROBLEM,
        both(rejected("missing_entry")),
        variants=(V("ref"), V("no_modelnew", own=NO_MODELNEW)),
        configs=None,
        language=None,
    ),
    Case(
        "missing_entry",
        "compare",
        TORCH,
        both(rejected("missing_entry")),
        variants=(V("ref", "run"), V("new", "run_missing")),
    ),
    Case("missing_setup", "profile", NO_SETUP, both(rejected("missing_setup"))),
    Case(
        "kb_problem_shape",
        "profile",
        KB_PROBLEM_ONLY,
        both(rejected("kernelbench_shape")),
        configs=None,
        language="kernelbench",
    ),
    Case(
        "kb_no_init_inputs",
        "profile",
        KB_NO_INIT_INPUTS,
        both(rejected("kernelbench_shape")),
        configs=None,
        language=None,
    ),
    Case(
        "cuda_without_its_source",
        "profile",
        TORCH,
        both(rejected("missing_cuda_source")),
        language="cuda",
    ),
    Case(
        "cuda_detected",
        "profile",
        CUDA_DETECTED,
        {"timing": Expect("environment", "gpu"), "ncu": ENV},
        language=None,
    ),
    Case("bad_entry_name", "profile", TORCH, both(rejected("field")), entry="-rf"),
    Case(
        "several_problems",
        "profile",
        SHARED_BROKEN,
        {
            "timing": rejected("syntax", "field", "unknown_metric", "option_method"),
            "ncu": rejected("syntax", "field", "unknown_metric"),
        },
        entry="-rf",
        fields={"metrics": ["dram__bytes_reed.sum"]},
    ),
    # --- options a method cannot honour, names that do not exist -----------------------------
    Case(
        "timing_clock_control",
        "profile",
        TORCH,
        timing_refuses("option_method"),
        fields={"clock_control": "base"},
    ),
    Case(
        "timing_metrics",
        "profile",
        TORCH,
        timing_refuses("option_method"),
        fields={"metrics": ["dram__bytes.sum"]},
    ),
    Case(
        "timing_skill",
        "profile",
        TORCH,
        timing_refuses("option_method"),
        fields={"skill": "memory"},
    ),
    Case(
        "timing_sections",
        "profile",
        TORCH,
        timing_refuses("option_method"),
        fields={"sections": ["SpeedOfLight"]},
        fronts=NOT_CLI,
    ),
    Case(
        "timing_replay_and_kernels",
        "profile",
        TORCH,
        timing_refuses("option_method", "option_method", "option_method"),
        fields={"replay_mode": "range", "ignore_kernels": ["k"], "combine_kernels": "none"},
        fronts=NOT_CLI,
    ),
    Case(
        "unknown_metric",
        "profile",
        TORCH,
        timing_refuses("option_method", "unknown_metric", ncu=rejected("unknown_metric")),
        fields={"metrics": ["dram__bytes_reed.sum"]},
    ),
    Case(
        "unknown_section",
        "profile",
        TORCH,
        timing_refuses("option_method", "unknown_section", ncu=rejected("unknown_section")),
        fields={"sections": ["SpeedOfLigth"]},
        fronts=NOT_CLI,
    ),
    Case(
        "unknown_skill",
        "profile",
        TORCH,
        timing_refuses("option_method", "unknown_skill", ncu=rejected("unknown_skill")),
        fields={"skill": "memroy"},
    ),
    Case(
        "option_the_tool_does_not_use",
        "profile",
        TORCH,
        both(rejected("option_tool")),
        fields={"deep": False},
        fronts=frozenset({"mcp"}),
    ),
    # --- the ncu-only use cases: diagnose and roofline from source ---------------------------
    Case(
        "diagnose_syntax", "diagnose", SHARED_BROKEN, {"ncu": rejected("syntax")}, entry="run_new"
    ),
    Case("diagnose_valid", "diagnose", TORCH, {"ncu": ENV}),
    Case(
        "roofline_missing_setup",
        "roofline",
        NO_SETUP,
        {"ncu": rejected("missing_setup")},
        fronts=NOT_CLI,
    ),
    Case("roofline_valid", "roofline", TORCH, {"ncu": ENV}, fronts=NOT_CLI),
]
