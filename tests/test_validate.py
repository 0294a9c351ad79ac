"""The validation stage (``service/validate.py``): every problem of a request at once, before
anything runs, named the same way by every front end; what it reads of a source
(``source_shape.py``); the candidates it drops alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nsight_agent import source_shape
from nsight_agent.engine.store.runs import load_run
from nsight_agent.errors import Problem, RequestRejected
from nsight_agent.server.options import Options, options_of, unused
from nsight_agent.service import profile
from nsight_agent.service.measure import Measuring, WorkerPool
from nsight_agent.service.summaries import compare_summary
from nsight_agent.service.validate import validate
from nsight_agent.wording import MESSAGE_CHARS, whole
from tests.conformance_cases import OWN_BROKEN, PROBLEM, TORCH

FIELDS = {"source": TORCH, "language": "torch", "configs": [{"n": 8}]}
TWO = [{"name": "ref", "entry": "run"}, {"name": "new", "entry": "run_new"}]


def rejected(
    fields: dict[str, object], method: str | None = "timing", **kw: object
) -> RequestRejected:
    with pytest.raises(RequestRejected) as err:
        validate(fields, method, **kw)  # type: ignore[arg-type]
    return err.value


def test_every_problem_is_listed_at_once_one_a_line() -> None:
    broken = TORCH.replace("def run_new(x):", "def run_new(x)")
    err = rejected(
        FIELDS
        | {
            "source": broken,
            "metrics": ["dram__bytes_reed.sum"],
            "clock_control": "base",
            "runs": 0,
        }
    )
    codes = sorted(p.code for p in err.problems)
    assert codes == ["field", "option_method", "option_method", "syntax", "unknown_metric"]
    lines = str(err).split("\nHint:")[0].splitlines()
    assert lines[0] == "The request has 5 problems; nothing was run:"
    assert lines[1] == "- source, line 12: syntax error: expected ':'"  # the certain one first
    assert "- runs: must be greater than or equal to 1" in lines
    assert any("Close matches: dram__bytes_read.sum" in x for x in lines)
    assert any(x.startswith("- clock_control: clock_control='base'") for x in lines)
    assert err.usage and not err.candidates_only


def test_a_candidates_syntax_error_names_its_file_or_its_variant_with_the_same_key() -> None:
    fields = FIELDS | {"variants": [TWO[0], {"name": "new", "source": OWN_BROKEN}]}
    over_mcp = rejected(fields).problems
    on_cli = rejected(fields, files={"": "k.py", "new": "new.py"}).problems
    assert [p.text() for p in over_mcp] == [
        "variant 'new' source, line 4: syntax error: expected ':'"
    ]
    assert [p.text() for p in on_cli] == [
        "new.py (variant 'new'), line 4: syntax error: expected ':'"
    ]
    assert over_mcp[0].variant == on_cli[0].variant == "new"
    assert not rejected(fields).usage  # a broken kernel: the command line exits 1


def test_a_syntax_error_wins_over_the_kernelbench_shape_of_the_same_source() -> None:
    broken = (Path(__file__).parent / "fixtures" / "kernelbench" / "new_honest.py").read_text()
    broken = broken.replace("def forward(self, x):", "def forward(self, x)")
    err = rejected(
        {"source": PROBLEM, "variants": [{"name": "ref"}, {"name": "new", "source": broken}]}
    )
    assert [p.code for p in err.problems] == ["syntax"], err
    assert "ModelNew" not in str(err).split("Hint:")[0] and err.candidates_only


def test_a_broken_candidate_is_dropped_alone_and_the_others_are_measured(tmp_path: Path) -> None:
    fields = FIELDS | {"variants": [*TWO, {"name": "broken", "source": OWN_BROKEN}]}
    checked = validate(fields, "timing", files={"broken": "broken.py"})
    assert [v.name for v in checked.request.effective_variants()] == ["ref", "new"]
    dropped = checked.dropped["broken"]
    assert (dropped.verdict, dropped.stage, dropped.line, dropped.file) == (
        "error",
        "import",
        4,
        "broken.py",
    )
    assert dropped.message == "broken.py (variant 'broken'), line 4: syntax error: expected ':'"
    with WorkerPool() as pool:
        run = profile.profile(Measuring(runs_root=tmp_path, workers=pool), "timing", **fields)
    again = load_run(run.run_id, tmp_path)  # stored with the run, read back by run_id
    assert again.dropped["broken"].message.startswith("variant 'broken' source, line 4")
    timing = compare_summary(again).configs[0].variants["broken"]
    assert timing.verdict == "error" and timing.check is not None
    assert timing.check.startswith("error at import (line 4): variant 'broken' source")
    status = json.loads((run.run_dir / "status.json").read_text())
    assert status["status"] == "passed" and "broken" in status["variants_failed"]


def test_the_baselines_own_broken_source_fails_the_request() -> None:
    fields = FIELDS | {"variants": [{"name": "ref", "source": OWN_BROKEN}, TWO[1]]}
    (problem,) = rejected(fields).problems
    assert problem.code == "syntax" and problem.variant is None  # nothing to compare with


@pytest.mark.parametrize(
    ("text", "bound"),
    [
        ("from kernels import *\n", True),  # cannot tell: no problem
        ("def __getattr__(name):\n    return None\n", True),
        ("globals()['run'] = print\n", True),
        ("from kernels import run\n", True),
        ("import torch\nrun = torch.relu\n", True),
        ("try:\n    import x\nexcept ImportError:\n    def run():\n        pass\n", True),
        ("if True:\n    (run := print)\n", True),
        ("def make():\n    def run():\n        pass\n", False),
        ("class K:\n    run = 1\n", False),
    ],
)
def test_what_a_module_binds_is_read_leniently(text: str, bound: bool) -> None:
    tree = source_shape.read(text)
    assert not isinstance(tree, source_shape.Unparsable)
    assert source_shape.binds(tree, "run") is bound


@pytest.mark.parametrize(
    ("init", "needs"),
    [
        ("def __init__(self, features):", ["features"]),
        ("def __init__(self, a, b=2, *args, c, d=1, **kw):", ["a", "c"]),
        ("def __init__(self, *args, **kwargs):", []),
        ("def __init__(self, features=8):", []),
        ("def forward(self, x):", []),  # no __init__ of its own
    ],
)
def test_what_a_problems_model_needs_to_be_built(init: str, needs: list[str]) -> None:
    text = f"class Model:\n    {init}\n        pass\n"
    tree = source_shape.read(text)
    assert not isinstance(tree, source_shape.Unparsable)
    assert source_shape.init_parameters(tree, "Model") == needs


def test_a_problem_without_init_inputs_is_valid_when_its_model_needs_none() -> None:
    """KernelBench builds Model(*get_init_inputs()); with nothing to pass, Model() is built."""
    no_init = PROBLEM.replace("def get_init_inputs():", "def init_inputs():")
    free = no_init.replace("def __init__(self, features):", "def __init__(self, features=8):")
    validate({"source": free, "language": "kernelbench"}, "timing")
    with pytest.raises(RequestRejected, match=r"Model\.__init__ needs features"):
        validate({"source": no_init, "language": "kernelbench"}, "timing")


@pytest.mark.parametrize(
    ("text", "cuda", "language"),
    [
        (PROBLEM, None, "kernelbench"),
        ('CUDA_SOURCE = """x"""\n\ndef setup(device):\n    return ()\n', None, "cuda"),
        ("def setup(device):\n    return ()\n", "__global__ void k() {}", "cuda"),
        (TORCH, None, None),
        ("def setup(:\n", None, None),
    ],
)
def test_the_language_of_a_source_sent_without_one(
    text: str, cuda: str | None, language: str | None
) -> None:
    assert source_shape.detect_language(text, cuda) == language


def test_a_cuda_source_without_language_is_run_as_cuda() -> None:
    source = 'import torch\n\nCUDA_SOURCE = "x"\n\n\ndef setup(n, device):\n    return ()\n\n\ndef run(ext):\n    pass\n'
    assert validate({"source": source, "configs": [{"n": 1}]}).request.language == "cuda"


@pytest.mark.parametrize(
    "field",
    [
        {"clock_control": "base"},
        {"replay_mode": "range"},
        {"sections": ["SpeedOfLight"]},
        {"skill": "memory"},
        {"metrics": ["dram__bytes.sum"]},
        {"report_counters": ["dram__bytes.sum"]},
        {"torch_ranges": True},
        {"ignore_kernels": ["k"]},
        {"combine_kernels": "none"},
        {"budget_s": 10.0},
    ],
)
def test_the_timing_path_refuses_what_it_cannot_honour(field: dict[str, object]) -> None:
    (problem,) = [p for p in rejected(FIELDS | field).problems if p.code == "option_method"]
    assert problem.where == next(iter(field)) and "ncu" in problem.hint
    validate(FIELDS | field, "ncu")  # ncu honours it


def test_the_timing_path_honours_cache_control_and_its_defaults_pass() -> None:
    for value in ("none", "all"):
        assert validate(FIELDS | {"cache_control": value}, "timing").request.cache_control == value
    validate(FIELDS | {"clock_control": "none", "combine_kernels": "sum", "metrics": []}, "timing")


def test_unknown_names_are_all_listed_with_close_matches() -> None:
    err = rejected(
        FIELDS
        | {
            "metrics": ["dram__bytes_reed.sum", "sm__thing"],
            "sections": ["SpeedOfLigth"],
            "skill": "memroy",
        },
        "ncu",
    )
    codes = sorted(p.code for p in err.problems)
    assert codes == ["unknown_metric", "unknown_metric", "unknown_section", "unknown_skill"]
    assert "SpeedOfLight" in str(err) and "memory" in str(err)


def test_a_tool_refuses_a_knob_it_does_not_use_saying_which_tools_take_it() -> None:
    (problem,) = unused(Options(rtol=0.1, deep=True), "profile_kernel")
    assert problem.where == "options.rtol" and "compare_variants" in problem.hint
    (reread,) = unused(Options(deep=False), "diagnose_kernel", reread=True)
    assert "measures nothing" in reread.message
    assert unused(Options(min_effect_pct=5.0), "compare_variants", reread=True) == []
    with pytest.raises(RequestRejected, match=r"options\.replay_mode: must be 'kernel' or 'range'"):
        options_of({"replay_mode": "app"})


def test_a_tool_argument_put_in_options_is_told_where_it_goes() -> None:
    with pytest.raises(RequestRejected) as err:
        options_of({"runs": 2, "clock_contrl": "base", "bogus": 1})
    said = str(err.value)
    assert "options.runs: is not an option (runs is an argument of the tool itself" in said
    assert "options.clock_contrl: is not an option (did you mean options.clock_control?)" in said
    assert "options.bogus: is not an option\n" in said + "\n"


def test_a_rejection_of_candidates_alone_is_kernelbenchs_compiled_false() -> None:
    from nsight_agent.views.kernelbench import rejected_report, render_kernelbench

    problem = Problem("syntax", "new.py (variant 'new')", "syntax error: x", line=3, variant="new")
    report = rejected_report([problem], "ref")
    (result,) = report.results
    assert result.compiled is False and result.runtime == -1.0 and report.run_id is None
    assert "new.py (variant 'new'), line 3" in (result.reason or "")
    assert "new: compiled=False" in render_kernelbench(report)
    assert RequestRejected([problem]).candidates_only


def test_a_long_message_is_kept_whole_or_cut_at_a_word_with_a_marker() -> None:
    said = "a machine with an NVIDIA GPU is needed to build it. " * 6
    assert whole(said) == said  # under the limit: whole, never cut mid-word
    long = "word " * (MESSAGE_CHARS // 4)
    cut = whole(long)
    assert cut.endswith("[cut; the run's result.json holds the whole message]")
    assert cut.split(" [cut")[0].rstrip(".").endswith("word")


def test_the_regression_gate_validates_the_new_source_before_measuring(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from nsight_agent import cli
    from nsight_agent.service import baselines

    with WorkerPool() as pool:
        run = profile.profile(Measuring(runs_root=tmp_path, workers=pool), "timing", **FIELDS)
    baselines.set_baseline("main", run.run_id, None, tmp_path)
    broken = TORCH.replace("def run(x):", "def run(x)")
    with pytest.raises(RequestRejected, match="source, line 8: syntax error"):
        baselines.check_source(broken, "main", runs_root=tmp_path)
    kernel = tmp_path / "kernel.py"
    kernel.write_text(broken)
    assert cli.main(["check", str(kernel), "--baseline", "main", "--runs-root", str(tmp_path)]) == 1
    assert f"{kernel}, line 8: syntax error: expected ':'" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir() if p.name[0].isdigit()) == [run.run_id]


def test_a_source_that_starts_with_a_byte_order_mark_is_read_as_python_reads_it() -> None:
    """An editor's UTF-8 BOM: Python runs such a file, so the request is no syntax error, on
    the shared source and a candidate's own alike (a dict or a ``Variant``)."""
    from nsight_agent.request import Variant

    bom = "\ufeff"
    own = {"name": "new", "entry": "run_new", "source": bom + TORCH}
    done = validate(FIELDS | {"source": bom + TORCH, "variants": [TWO[0], own]}, "timing")
    assert done.request.source == TORCH and not done.dropped
    assert [v.source for v in done.request.variants] == [None, TORCH]
    model = Variant(name="new", entry="run_new", source=bom + TORCH)
    done = validate(FIELDS | {"variants": [TWO[0], model]}, "timing")
    assert done.request.variants[1].source == TORCH


def test_the_cli_reads_a_file_with_a_byte_order_mark_and_names_a_folder(tmp_path: Path) -> None:
    from nsight_agent.cli.inputs import kernel_source
    from nsight_agent.errors import InvalidRequestError

    path = tmp_path / "kernel.py"
    path.write_bytes(b"\xef\xbb\xbf" + TORCH.encode())
    validate(FIELDS | {"source": kernel_source(path, "profile")}, "timing")
    with pytest.raises(InvalidRequestError, match="is a folder, not a file"):
        kernel_source(tmp_path, "profile")
