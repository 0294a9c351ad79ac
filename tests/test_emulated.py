"""Honest CPU numbers: a variant whose kernels ran under Triton's interpreter (TRITON_INTERPRET,
how Triton runs on a CPU) is labelled "emulated: Triton interpreter, not a kernel time" in the
CLI's text, JSON and MCP answers, and gets no speed verdict against a native variant. The
detection runs Triton's interpreter for real, in this process and through the server on the
CPU timing path; the rule is checked on synthetic sample sets."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from mcp import Client
from mcp.types import TextContent

from nsight_agent.engine.harness import emulation
from nsight_agent.judge.comparison import compare_run
from nsight_agent.judge.run_diff import diff_runs
from nsight_agent.judge.run_warnings import run_warnings
from nsight_agent.server.app import build_server
from nsight_agent.views import compare as compare_view
from nsight_agent.views import text
from tests.sampled_runs import sampled

LABEL = "emulated: Triton interpreter, not a kernel time"
ROOT = Path(__file__).resolve().parents[1]
VECTOR_ADD = ROOT / "examples" / "contract" / "triton_vector_add.py"
KERNEL = """
import triton
import triton.language as tl

@triton.jit
def double(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)

def run(x):
    double[(1,)](x, x.numel(), BLOCK=16)
    return x

def reference(x):
    return x * 2
"""


def test_only_the_variant_that_launched_an_interpreted_kernel_is_marked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # before the kernel is decorated
    scope: dict[str, object] = {}
    exec(compile(KERNEL, "<kernel>", "exec"), scope)
    entries, emulated = emulation.watched({"triton": scope["run"], "torch": scope["reference"]})
    for entry in entries.values():
        entry(torch.ones(8))  # type: ignore[operator]
    assert emulated == {"triton"}
    rows = [{"Annotation": "triton"}, {"Annotation": "torch"}]
    emulation.label_rows(rows, emulated)
    assert [r["Emulated"] for r in rows] == [emulation.TRITON_INTERPRETER, None]
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert emulation.watched({"torch": scope["reference"]})[1] == set()  # nothing watched


def _quiet(rng: random.Random, at_us: float) -> list[float]:
    return [at_us * rng.lognormvariate(0, 0.02) for _ in range(100)]


def test_emulated_against_native_gets_no_speed_verdict_and_says_why(tmp_path: Path) -> None:
    rng = random.Random(0)
    samples = {"torch": _quiet(rng, 20.0), "triton": _quiet(rng, 32_000.0)}
    run = sampled(
        tmp_path, "20261206-000000-emu000000000", samples, emulated={"triton": "Triton interpreter"}
    )
    comparison = compare_run(run)
    torch_t, triton_t = (comparison.configs[0].variants[n] for n in ("torch", "triton"))
    assert torch_t.emulated is None and triton_t.emulated == "Triton interpreter"
    assert triton_t.verdict == "emulated" and triton_t.speedup is None
    assert triton_t.check and triton_t.check.startswith("no speed verdict: this variant ran")
    overall = comparison.overall["triton"]
    assert overall.verdict == "emulated" and overall.geomean_speedup is None
    warnings = run_warnings(run, run.processed)
    summary = compare_view.compare_summary(comparison, run, warnings)
    said = text.render_compare(summary)
    assert f"triton 32 ms (median 32.1 ms; {LABEL}) emulated" in said, said
    assert "slower" not in said.split("rule:")[0] and "x0." not in said
    assert any(w.startswith(LABEL) for w in warnings), warnings
    dumped = summary.model_dump()["configs"][0]["variants"]["triton"]
    assert dumped["emulated"] == "Triton interpreter" and dumped["speedup"] is None


def test_two_emulated_variants_are_compared_and_labelled(tmp_path: Path) -> None:
    rng = random.Random(1)
    samples = {"a": _quiet(rng, 30_000.0), "b": _quiet(rng, 60_000.0)}
    both = {"a": "Triton interpreter", "b": "Triton interpreter"}
    comparison = compare_run(
        sampled(tmp_path, "20261206-000000-emu000000001", samples, emulated=both)
    )
    b = comparison.configs[0].variants["b"]
    assert b.verdict == "slower" and b.speedup is not None and b.emulated == "Triton interpreter"


def test_a_run_emulated_against_a_native_baseline_is_not_compared(tmp_path: Path) -> None:
    rng = random.Random(2)
    native = sampled(tmp_path, "20261206-000000-native000000", _quiet(rng, 20.0))
    emulated = sampled(
        tmp_path,
        "20261206-000001-emul00000000",
        _quiet(rng, 30_000.0),
        emulated={"run": "Triton interpreter"},
    )
    d = diff_runs(native, emulated, name="main")
    assert not d.comparable and d.regression is None
    assert d.reasons == ["emulation differs: baseline native, this run Triton interpreter"]
    same = diff_runs(emulated, emulated, name="main")
    assert same.comparable and LABEL in (same.notes or [])


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_the_mcp_answer_labels_the_interpreted_variant(tmp_path: Path) -> None:
    pytest.importorskip("triton")
    args = {
        "source": VECTOR_ADD.read_text(),
        "variants": [{"name": "torch", "entry": "reference"}, {"name": "triton", "entry": "run"}],
        "configs": [{"n": 256, "block_size": 256}],
        "language": "triton",
        "method": "timing",
    }
    async with Client(build_server(tmp_path)) as client:
        result = await client.call_tool("compare_variants", args)
    said = "\n".join(c.text for c in result.content if isinstance(c, TextContent))
    assert not result.is_error, said
    data = result.structured_content or {}
    variants = data["configs"][0]["variants"]
    assert variants["torch"].get("emulated") is None
    assert variants["triton"]["emulated"] == "Triton interpreter"
    assert variants["triton"]["verdict"] == "emulated" and variants["triton"].get("speedup") is None
    assert data["overall"]["triton"]["verdict"] == "emulated"
    assert any(w.startswith(LABEL) for w in data["warnings"]), data["warnings"]
    assert LABEL in said
