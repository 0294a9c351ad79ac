"""The conformance matrix: every request of ``conformance_cases.CASES`` through every front end
that can say it (the MCP tool through the SDK's in-process client, the CLI's ``main`` with the
sources in files, the Python API: the service functions) and both methods, each answer reduced
to its class and key (``Answer``). Every path must give the same one, and it must be the case's
``Expect``: timing for real on the CPU (torch; Triton in its interpreter), ncu as this machine
answers it (the validation stage's rejection, else "ncu was not found"); under the ``gpu``
marker, real ncu runs, which must agree with the timing path.

It fails when one path diverges: ``test_the_matrix_catches_a_path_that_diverges`` breaks one
on purpose (the CLI measuring without the validation stage; an answer tampered with) and
shows the comparison naming it.

Heavy parts share one xdist group: one worker pool for the API and the CLI (the CLI's own
pool would cost a worker start per command: the only difference is whose process times),
one MCP server for the module. The static rejections cost nothing.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp import Client
from mcp.types import TextContent

from nsight_agent import cli
from nsight_agent.cli.terms import cli_terms
from nsight_agent.errors import KERNEL_PROBLEMS, NsightAgentError, RequestRejected
from nsight_agent.server.app import build_server
from nsight_agent.service import diagnose, profile
from nsight_agent.service import measure as measuring
from nsight_agent.service.measure import Measuring, WorkerPool
from nsight_agent.service.summaries import compare_summary, profile_summary
from nsight_agent.views.common import dump
from tests.conformance_cases import CASES, ENV, Case, Expect, Method
from tests.conftest import gpu_available

pytestmark = pytest.mark.xdist_group("conformance")

SPEED = frozenset({"faster", "slower", "within_noise", "mixed"})
TOOLS = {
    "profile": "profile_kernel",
    "compare": "compare_variants",
    "diagnose": "diagnose_kernel",
    "roofline": "roofline_metrics",
}
TOP_LEVEL = {"metrics", "skill"}  # a tool's own arguments; every other field is an option


@dataclass(frozen=True)
class Answer:
    """One path's answer: its class and key (what every path must share), the problems'
    codes where the path has them (the API) and the command line's exit code."""

    cls: str
    key: Any
    codes: tuple[str, ...] | None = None
    rc: int | None = None


# --- reducing an answer to its class and key --------------------------------------------------


def _problem_line(line: str) -> tuple[str, str, str]:
    """``- WHERE[, line N]: MESSAGE`` -> (where, line, message)."""
    found = re.match(r"- (?P<where>.+?)(?:, line (?P<line>\d+))?: (?P<said>.*)$", line)
    assert found, line
    # a tool's knobs live under options: the same field as the request's
    return found["where"].removeprefix("options."), found["line"] or "", found["said"]


def text_answer(text: str, rc: int | None = None) -> Answer:
    """An error's text (a ToolError's, the CLI's stderr, the exception's) as an answer."""
    text = re.sub(r"^(Error executing tool \w+: |error: )", "", cli_terms(text.strip()))
    body = text.split("\nHint:")[0]
    first = body.splitlines()[0] if body else ""
    if re.match(r"The request has \d+ problems?; nothing was run:", first):
        lines = tuple(sorted(_problem_line(x) for x in body.splitlines()[1:]))
        return Answer("rejected", lines, rc=rc)
    if "ncu" in first and "not found" in first:
        return Answer("environment", "ncu", rc=rc)
    if "runs only on an NVIDIA GPU" in first:
        return Answer("environment", "gpu", rc=rc)
    failed = re.match(r"(\w+) failed", first)
    if failed:
        return Answer("source_error", failed[1], rc=rc)
    return Answer("other", first, rc=rc)


def _why(check: str) -> str:
    """The kind of a failed check: what a path must agree on (not its wording)."""
    for needle, kind in (("NaN", "nan"), ("Inf", "inf"), ("got ", "structure")):
        if needle in check:
            return kind
    for needle in ("shape", "dtype"):
        if f"has {needle}" in check:
            return needle
    return "values"


def _variant_key(verdict: str, check: str | None) -> str:
    if verdict == "baseline":
        return "baseline"
    # "emulated": measured and checked, but no speed said between an interpreter and a native
    # variant (a Triton variant on a CPU); on a GPU the same row reads a speed verdict
    if verdict in SPEED or verdict == "emulated":
        return "measured_ok"
    dropped = re.match(r"(\w+) at (\w+)(?: \(line (\d+)\))?", check or "")
    if dropped and verdict not in ("incorrect", "suspect"):  # those: what was wrong, not where
        return f"{verdict}@{dropped[2]}:{dropped[3] or ''}"
    return f"{verdict}:{_why(check or '')}"


def measured_answer(kind: str, summary: dict[str, Any], rc: int | None = None) -> Answer:
    """A compare or profile answer (the structured content, the CLI's --json, the API's
    summary: the same dump) as each variant's verdict key."""
    if kind == "compare":
        keys = {}
        for name, overall in summary["overall"].items():
            checks = [c["variants"].get(name, {}).get("check") for c in summary["configs"]]
            keys[name] = _variant_key(overall["verdict"], next((c for c in checks if c), None))
        return Answer("measured", tuple(sorted(keys.items())), rc=rc)
    if kind == "profile":
        correct = all(r.get("correct") is not False for r in summary["results"])
        names = tuple(summary.get("kernels") or {})
        return Answer(
            "measured",
            tuple((n, "measured_ok" if correct else "wrong_output") for n in names),
            rc=rc,
        )
    return Answer("measured", (), rc=rc)  # a diagnosis or a roofline came back


# --- the three front ends ---------------------------------------------------------------------


def request_fields(case: Case) -> dict[str, Any]:
    fields: dict[str, Any] = {"source": case.source, "language": case.language}
    fields["configs"] = case.configs
    if case.kind == "compare":
        fields["variants"] = [_variant(v) for v in case.variants]
        fields["baseline"] = case.variants[0].name
    else:
        fields["entry"] = case.entry
    if case.kind in ("compare", "profile"):
        fields["runs"] = 2
    return fields | case.fields


def _variant(v: Any) -> dict[str, Any]:
    out = {"name": v.name}
    out |= {"entry": v.entry} if v.entry else {}
    out |= {"source": v.own} if v.own else {}
    return out


@dataclass
class Paths:
    """Where the fronts run: one runs folder, one worker pool (API, CLI), one MCP client."""

    root: Path
    pool: WorkerPool
    portal: BlockingPortal
    client: Client

    def api(self, case: Case, method: Method) -> Answer:
        where = Measuring(runs_root=self.root / "api-runs", workers=self.pool)
        fields = {k: v for k, v in request_fields(case).items()}
        try:
            if case.kind == "diagnose":
                diagnose.diagnose_source(fields, where)
            elif case.kind == "roofline":
                profile.roofline(where, **fields)
            else:
                run = profile.profile(where, method, **fields)
                summary = (
                    compare_summary(run, limit=10_000)
                    if case.kind == "compare"
                    else profile_summary(run)
                )
                return measured_answer(case.kind, dump(summary))
            return measured_answer(case.kind, {})
        except RequestRejected as err:
            answer = text_answer(str(err))
            return Answer(answer.cls, answer.key, tuple(sorted(p.code for p in err.problems)))
        except NsightAgentError as err:
            return text_answer(str(err))

    def mcp(self, case: Case, method: Method) -> Answer:
        fields = request_fields(case)
        args = {
            k: v
            for k, v in fields.items()
            if k
            in (
                "source",
                "configs",
                "language",
                "entry",
                "variants",
                "runs",
                "baseline",
                *TOP_LEVEL,
            )
        }
        args = {k: v for k, v in args.items() if v is not None}
        options = {
            k: v for k, v in fields.items() if k not in args and k not in ("configs", "language")
        }
        args |= {"options": options} if options else {}
        args |= {"method": method} if case.kind in ("profile", "compare") else {}
        result = self.portal.call(self.client.call_tool, TOOLS[case.kind], args)
        if result.is_error:
            return text_answer(
                "\n".join(c.text for c in result.content if isinstance(c, TextContent))
            )
        return measured_answer(case.kind, result.structured_content or {})

    def cli(self, case: Case, method: Method) -> Answer:
        folder = self.root / "cli" / f"{case.name}-{method}"
        folder.mkdir(parents=True, exist_ok=True)
        main = folder / "source.py"
        main.write_text(case.source)
        argv = [case.kind, str(main)] + (["--json"] if case.kind != "roofline" else [])
        if case.kind in ("profile", "compare"):
            argv += ["--method", method, "--runs", "2"]
        if case.kind != "compare":
            argv += [f"--entry={case.entry}"]
        for v in case.variants:
            if v.own:
                (folder / f"{v.name}.py").write_text(v.own)
                argv += ["--candidate", str(folder / f"{v.name}.py")]
            elif v.entry:
                argv += ["--variant", f"{v.name}={v.entry}"]
        for config in case.configs or []:
            argv += ["--config", *(f"{k}={v}" for k, v in config.items())]
        argv += ["--language", case.language] if case.language else []
        for name, value in case.fields.items():
            flag = "--" + name.replace("_", "-")
            argv += [flag, ",".join(value) if isinstance(value, list) else str(value)]
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), self._cli_pool():
            rc = cli.main(argv)
        said = err.getvalue()
        # The error, past the progress lines the CLI prints on a stderr that is no terminal
        error = re.search(r"(?m)^error: ", said)
        said = said[error.start() :] if error else said
        for v in case.variants:  # the files the CLI names, as the other fronts name the sources
            said = said.replace(
                f"{folder / f'{v.name}.py'} (variant {v.name!r})", f"variant {v.name!r} source"
            )
        said = said.replace(str(main), "source")
        if rc == 0:
            return measured_answer(case.kind, json.loads(out.getvalue()), rc=rc)
        return text_answer(said, rc=rc)

    @contextlib.contextmanager
    def _cli_pool(self) -> Iterator[None]:
        """The CLI's timing runs on the shared pool (its own would be a worker start a call)."""
        original = measuring._workers

        @contextlib.contextmanager
        def shared(given: WorkerPool | None) -> Iterator[WorkerPool]:
            yield given or self.pool

        measuring._workers = shared  # type: ignore[assignment]
        try:
            yield
        finally:
            measuring._workers = original  # type: ignore[assignment]


def answers(paths: Paths, case: Case, method: Method) -> dict[str, Answer]:
    return {front: getattr(paths, front)(case, method) for front in sorted(case.fronts)}


def disagreement(found: dict[str, Answer]) -> str | None:
    """None when every path gave the same class and key; else who said what."""
    if len({(a.cls, a.key) for a in found.values()}) <= 1:
        return None
    return "paths disagree:\n" + "\n".join(
        f"  {front}: {a.cls} {a.key}" for front, a in found.items()
    )


def mismatch(expect: Expect, found: dict[str, Answer]) -> str | None:
    """None when the (agreed) answer is what the case expects."""
    answer = next(iter(found.values()))
    if answer.cls != expect.cls:
        return f"expected {expect.cls} {expect.key}, got {answer.cls} {answer.key}"
    if expect.cls == "rejected":
        codes = found["api"].codes if "api" in found else None
        if codes is not None and codes != expect.key:
            return f"expected problems {expect.key}, got {codes}"
    elif expect.cls in ("environment", "source_error") and answer.key != expect.key:
        return f"expected {expect.cls} {expect.key}, got {answer.key}"
    elif expect.cls == "measured":
        got = dict(answer.key)
        for name, want in expect.key.items():
            also = expect.also.get(name, frozenset())
            if got.get(name) != want and not any(str(got.get(name)).startswith(a) for a in also):
                return f"variant {name}: expected {want}, got {got.get(name)} (all: {got})"
        if set(got) != set(expect.key):
            return f"variants {sorted(got)}, expected {sorted(expect.key)}"
    for front, a in found.items():  # the command line's exit code, as README's table says
        if front == "cli" and a.rc is not None:
            usage = expect.cls == "rejected" and bool(set(expect.key) - KERNEL_PROBLEMS)
            want = 0 if expect.cls == "measured" else 2 if usage else 1
            if a.rc != want:
                return f"cli exit code {a.rc}, expected {want}"
    return None


# --- the matrix -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Paths]:
    root = tmp_path_factory.mktemp("conformance")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("NSIGHT_AGENT_RUNS", str(root / "cli-runs"))
        env.delenv("NCU", raising=False)
        with WorkerPool() as pool, start_blocking_portal() as portal:
            server = build_server(runs_root=root / "mcp-runs")
            with portal.wrap_async_context_manager(Client(server)) as client:
                yield Paths(root, pool, portal, client)


def _rows() -> list[Any]:
    rows = []
    for case in CASES:
        for method in case.methods:
            rows.append(pytest.param(case, method, id=f"{case.name}-{method}"))
    return rows


@pytest.mark.parametrize(("case", "method"), _rows())
def test_every_path_gives_the_same_answer(paths: Paths, case: Case, method: Method) -> None:
    if case.expect[method] in (ENV, Expect("environment", "gpu")) and _ncu_here():
        pytest.skip("a GPU with ncu is here: test_ncu_on_the_gpu_gives_the_timing_paths_answer")
    found = answers(paths, case, method)
    assert disagreement(found) is None, disagreement(found)
    assert mismatch(case.expect[method], found) is None, mismatch(case.expect[method], found)


def _ncu_here() -> bool:
    return gpu_available()[0]


# Under ncu each request costs a profile per front end (one cold process each, queued on the
# GPU's profiler lock): these rows go through every front end, the rest through the service
# functions only. The front ends' sameness is the CPU matrix's (validation, timing, and ncu's
# refusal after validation); on the GPU what is added is the method's sameness, on every row.
EVERY_FRONT_ON_GPU = frozenset(
    {"good_torch", "kb_candidates", "wrong_outputs", "entry_raises", "baseline_nan"}
)


def _gpu_rows() -> list[Any]:
    rows = []
    for case in CASES:
        if case.expect.get("ncu") == ENV:
            rows.append(pytest.param(case, marks=[pytest.mark.gpu], id=case.name))
    return rows


@pytest.mark.parametrize("case", _gpu_rows())
def test_ncu_on_the_gpu_gives_the_timing_paths_answer(paths: Paths, case: Case) -> None:
    """Where ncu runs: the ncu answer (the same on every front end, for the rows that take
    them all) and the timing path's on this GPU; a diagnosis or a roofline: that it came back;
    an option only ncu honours: measured under ncu, refused (as on the CPU) by timing."""
    if case.name not in EVERY_FRONT_ON_GPU:
        case = replace(case, fronts=frozenset({"api"}))
    found = answers(paths, case, "ncu")
    assert disagreement(found) is None, disagreement(found)
    answer = next(iter(found.values()))
    if case.kind in ("diagnose", "roofline") or case.expect["timing"].cls == "rejected":
        assert answer.cls == "measured", found
        return
    timed = answers(paths, case, "timing")
    assert disagreement(timed) is None, disagreement(timed)
    assert answer.key == next(iter(timed.values())).key, (found, timed)


# --- the matrix fails when one path diverges ------------------------------------------------


BY_NAME = {c.name: c for c in CASES}


def _measure_without_validation(
    method: str, stage: str, runs_root: str | None = None, **fields: Any
) -> Any:
    """The CLI's measuring call as it would be without the validation stage: the request
    built as sent, straight to the machine."""
    from nsight_agent.request import ProfileRequest

    fields.pop("files", None)
    request = ProfileRequest(**{k: v for k, v in fields.items() if v is not None})
    return measuring.measure(request, method, Measuring())  # type: ignore[arg-type]


@pytest.mark.parametrize("broken", ["cli_skips_validation", "mcp_answer_tampered"])
def test_the_matrix_catches_a_path_that_diverges(
    paths: Paths, monkeypatch: pytest.MonkeyPatch, broken: str
) -> None:
    """One path broken on purpose: the matrix's comparison names it (and the row would fail)."""
    case = BY_NAME["candidate_syntax_alone"]
    if broken == "cli_skips_validation":
        from nsight_agent.cli import compare

        monkeypatch.setattr(compare, "measure_source", _measure_without_validation)
        found = answers(paths, case, "timing")
    else:
        found = answers(paths, case, "timing")
        real = found["mcp"]
        found["mcp"] = Answer(
            real.cls, tuple((w, "5" if line else line, s) for w, line, s in real.key)
        )
    said = disagreement(found)
    assert said is not None and ("cli:" in said if broken.startswith("cli") else "mcp:" in said), (
        found
    )
    assert mismatch(case.expect["timing"], {"api": found["api"]}) is None
