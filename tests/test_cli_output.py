"""The command line's output: rich tables on a terminal, plain stable text in a
pipe, colour only where wanted, progress on stderr only on a terminal, --json untouched."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from nsight_agent import cli
from nsight_agent.cli import output, tables
from nsight_agent.service.diagnose import diagnose_file
from nsight_agent.service.summaries import report_summary
from nsight_agent.views import common, text

FIXTURES = Path(__file__).parent / "fixtures"
H200_REPORT = FIXTURES / "h200_bf16_matmul_sections.ncu-rep"
UNCOALESCED = FIXTURES / "planted" / "uncoalesced_triton.ncu-rep"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


class Terminal(io.StringIO):
    """A stream that says it is a terminal (what rich and output.py ask)."""

    def isatty(self) -> bool:
        return True


def on_terminal(monkeypatch: pytest.MonkeyPatch) -> Terminal:
    """stdout a terminal from here on (set in the test itself: pytest puts its own capture
    back after fixtures run)."""
    out = Terminal()
    monkeypatch.setattr("sys.stdout", out)
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("TERM", raising=False)
    monkeypatch.setenv("COLUMNS", "160")
    return out


def test_a_terminal_gets_a_coloured_table(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = on_terminal(monkeypatch)
    assert cli.main(["report", str(H200_REPORT)]) == 0
    shown = terminal.getvalue()
    assert ANSI.search(shown), "no colour on a terminal"
    plain = ANSI.sub("", shown)
    assert "┃" in plain and "SOL compute" in plain and "compute-bound" in plain
    assert "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT" in plain


def test_no_color_keeps_the_table_without_colour(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = on_terminal(monkeypatch)
    monkeypatch.setenv("NO_COLOR", "1")
    assert cli.main(["diagnose", str(UNCOALESCED)]) == 0
    shown = terminal.getvalue()
    assert "┃" in shown and "uncoalesced_global_access" in shown
    colours = [c for c in ANSI.findall(shown) if re.search(r"\[(3[0-7]|9[0-7]|38;)", c)]
    assert colours == [], colours


def test_a_pipe_gets_the_plain_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["report", str(H200_REPORT)]) == 0
    out = capsys.readouterr().out
    s = report_summary(H200_REPORT, limit=20, findings=3)
    assert out == text.render_report(s) + "\n"  # stable: what MCP clients read too
    assert not ANSI.search(out) and "┃" not in out


@pytest.mark.parametrize("command", ["report", "diagnose"])
def test_json_is_the_model_dump_even_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    terminal = on_terminal(monkeypatch)
    assert cli.main([command, str(H200_REPORT), "--json"]) == 0
    if command == "report":
        model = report_summary(H200_REPORT, limit=20, findings=3)
    else:
        model = diagnose_file(H200_REPORT, limit=3)
    assert terminal.getvalue() == json.dumps(common.dump(model), indent=1) + "\n"


def test_progress_is_a_spinner_on_a_terminal_and_lines_in_a_pipe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    err = Terminal()
    monkeypatch.setattr("sys.stderr", err)
    monkeypatch.delenv("TERM", raising=False)
    with output.progress("profiling k.py under ncu") as step:
        step(1, 3, "pre-flight passed")
    assert "profiling k.py under ncu: done in" in ANSI.sub("", err.getvalue())

    piped = io.StringIO()
    monkeypatch.setattr("sys.stderr", piped)
    with output.progress("profiling k.py under ncu") as step:
        step(1, 3, "pre-flight: passed")
    lines = piped.getvalue().splitlines()
    assert lines[0] == "profiling k.py under ncu" and not ANSI.search(piped.getvalue())
    assert lines[1].endswith("s] pre-flight: passed (1/3 calls)")
    assert lines[2].startswith("profiling k.py under ncu: done in")


def test_every_renderer_draws() -> None:
    """The tables of report (with one-line kernels) and diagnose, hints in command terms."""
    from rich.console import Console

    narrow = Console(file=io.StringIO(), width=140, force_terminal=True)
    sweep = report_summary(FIXTURES / "engine" / "sweep" / "report.ncu-rep", limit=2)
    narrow.print(tables.report(sweep))
    narrow.print(tables.diagnosis(diagnose_file(UNCOALESCED)))
    drawn = ANSI.sub("", narrow.file.getvalue())  # type: ignore[attr-defined]
    assert "share" in drawn and "nsight-agent skills memory" in drawn
    # Paging hints name the command, not the MCP call (read with the console's wrapping undone:
    # the hint holds the report's path, which wraps where the checkout's path is long).
    flat = " ".join(drawn.split())
    assert "nsight-agent report" in flat and "--offset 2" in flat
    assert "summarize_report(" not in drawn
