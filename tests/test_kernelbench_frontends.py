"""KernelBench's files through the front ends, with no adapter: the MCP tools with
``configs`` and ``language`` left out, and ``nsight-agent compare PROBLEM --candidate FILE``
with its KernelBench-style result. Real harness, torch on the CPU, the timing path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.types import TextContent

from nsight_agent import cli
from nsight_agent.server.app import build_server
from tests.conformance_cases import INIT_RAISES

FIXTURES = Path(__file__).parent / "fixtures" / "kernelbench"
PROBLEM = (FIXTURES / "problem_linear_relu.py").read_text()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _text(result: Any) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


@pytest.mark.anyio
async def test_the_tools_take_a_problem_and_candidates_as_they_are(tmp_path: Path) -> None:
    async with Client(build_server(tmp_path)) as client:
        alone = await client.call_tool("profile_kernel", {"source": PROBLEM, "method": "timing"})
        assert not alone.is_error, _text(alone)
        assert (alone.structured_content or {})["kernels"].keys() == {"ref"}
        compared = await client.call_tool(
            "compare_variants",
            {
                "source": PROBLEM,
                "method": "timing",
                "variants": [
                    {"name": "ref"},
                    {"name": "honest", "source": (FIXTURES / "new_honest.py").read_text()},
                    {"name": "zeroes", "source": (FIXTURES / "new_zeroes_input.py").read_text()},
                ],
                "options": {"correctness": "kernelbench"},
            },
        )
        assert not compared.is_error, _text(compared)
        overall = (compared.structured_content or {})["overall"]
        assert overall["honest"]["verdict"] in ("within_noise", "faster", "slower"), overall
        assert overall["zeroes"]["verdict"] == "incorrect", overall
        # a contract source still needs its configs, and says so
        missing = await client.call_tool(
            "profile_kernel", {"source": "def setup(n, device):\n    return ()\n"}
        )
        assert missing.is_error and "configs is required" in _text(missing)


def test_the_cli_compares_a_candidate_file_and_prints_kernelbench_fields(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NSIGHT_AGENT_RUNS", str(tmp_path))
    argv = [
        "compare",
        str(FIXTURES / "problem_linear_relu.py"),
        "--candidate",
        str(FIXTURES / "new_honest.py"),
        "--candidate",
        str(FIXTURES / "new_raises.py"),
        "--method",
        "timing",
        "--kernelbench-result",
        "--json",
    ]
    assert cli.main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    by_name = {r["variant"]: r for r in report["results"]}
    assert by_name["new_honest"]["correctness"] is True and by_name["new_honest"]["compiled"]
    assert by_name["new_raises"]["verdict"] == "error"
    assert (
        by_name["new_raises"]["correctness"] is False and by_name["new_raises"]["runtime"] == -1.0
    )


@pytest.mark.anyio
async def test_the_timing_path_refuses_counters_instead_of_dropping_them(tmp_path: Path) -> None:
    async with Client(build_server(tmp_path)) as client:
        for extra in ({"metrics": ["dram__bytes.sum"]}, {"skill": "memory"}):
            result = await client.call_tool(
                "profile_kernel", {"source": PROBLEM, "method": "timing", **extra}
            )
            text = _text(result)
            assert result.is_error and "measures each call's time only" in text, text
            assert "method 'ncu'" in text


BROKEN = (
    (FIXTURES / "new_honest.py")
    .read_text()
    .replace("def forward(self, x):", "def forward(self, x)")
)


def _kernelbench_result(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    rc = cli.main(["compare", str(FIXTURES / "problem_linear_relu.py"), *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_a_candidate_that_does_not_compile_is_compiled_false_in_both_modes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """KernelBench's answer for a candidate with a syntax error: compiled=False and the reason
    (its file and line), an evaluation that completed (exit 0), with or without --json; the
    others are measured. Alone, it is refused before any run, and said the same way."""
    monkeypatch.setenv("NSIGHT_AGENT_RUNS", str(tmp_path / "runs"))
    broken = tmp_path / "new_broken.py"
    broken.write_text(BROKEN)
    honest = str(FIXTURES / "new_honest.py")
    flags = ["--method", "timing", "--kernelbench-result"]
    rc, out, _ = _kernelbench_result(["--candidate", str(broken), *flags, "--json"], capsys)
    assert rc == 0
    (alone,) = json.loads(out)["results"]
    assert alone["variant"] == "new_broken" and alone["compiled"] is False
    assert f"{broken} (variant 'new_broken'), line 12: syntax error" in alone["reason"]
    rc, out, _ = _kernelbench_result(["--candidate", str(broken), *flags], capsys)
    assert rc == 0 and "new_broken: compiled=False correctness=False" in out, out
    assert "no run (every candidate refused)" in out

    # A constructor that raises was built: KernelBench's eval says compiled=True for it.
    init_raises = tmp_path / "init_raises.py"
    init_raises.write_text(INIT_RAISES)
    both = ["--candidate", honest, "--candidate", str(broken), "--candidate", str(init_raises)]
    both += flags
    rc, out, _ = _kernelbench_result([*both, "--json"], capsys)
    assert rc == 0
    by_name = {r["variant"]: r for r in json.loads(out)["results"]}
    assert by_name["new_honest"]["compiled"] and by_name["new_honest"]["correctness"]
    assert by_name["init_raises"]["compiled"] and not by_name["init_raises"]["correctness"]
    assert by_name["new_broken"]["compiled"] is False
    assert "line 12: syntax error" in by_name["new_broken"]["reason"]
    rc, out, _ = _kernelbench_result(both, capsys)
    assert rc == 0 and "new_broken: compiled=False" in out and "new_honest: compiled=True" in out


def test_without_kernelbench_result_a_lone_broken_candidate_is_a_broken_kernel(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NSIGHT_AGENT_RUNS", str(tmp_path / "runs"))
    broken = tmp_path / "new_broken.py"
    broken.write_text(BROKEN)
    rc, _, err = _kernelbench_result(["--candidate", str(broken), "--method", "timing"], capsys)
    assert rc == 1, err  # a broken kernel, not usage
    assert f"{broken} (variant 'new_broken'), line 12: syntax error: expected ':'" in err
    assert not (tmp_path / "runs").exists()  # refused before any run folder


@pytest.mark.anyio
async def test_the_candidates_syntax_error_is_named_by_line_over_mcp(tmp_path: Path) -> None:
    """The same key as on the command line: the line and the compiler's words, not "defines
    no class 'ModelNew'"."""
    async with Client(build_server(tmp_path)) as client:
        result = await client.call_tool(
            "compare_variants",
            {
                "source": PROBLEM,
                "method": "timing",
                "variants": [{"name": "ref"}, {"name": "new", "source": BROKEN}],
            },
        )
    text = _text(result)
    assert result.is_error and "- variant 'new' source, line 12: syntax error: expected ':'" in text
    assert "ModelNew" not in text.split("Hint:")[0]
