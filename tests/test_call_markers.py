"""Call markers: an attached run's kernels tied to the harness's calls
without NVTX. The kernels are the H200 sweep report's (18 kernels, each (call, annotation) of
it taken as one harness call, as the harness makes one annotation per call); the markers
around them and the set-up kernels between calls are made here, since no report recorded
with markers exists yet (the GPU test in test_engine_targets.py runs the real thing). What
the markers tie must equal what the report's NVTX ranges tie, rows included; anything that
does not fit is a ``MarkerMismatch`` naming the call, and the attach path goes cold on it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from nsight_agent.engine.collection import call_markers, extract, preflight_run
from nsight_agent.engine.collection.call_markers import MarkerMismatch
from nsight_agent.engine.collection.collect import attach
from nsight_agent.engine.collection.extract import ActionRecord, Call
from nsight_agent.engine.harness import call_markers as harness_markers
from nsight_agent.engine.harness.call_markers import BEGIN, END, MARKER_KERNEL
from nsight_agent.engine.store.records import RunFiles
from tests.fakes import FakeAction

SWEEP = Path(__file__).parent / "fixtures" / "engine" / "sweep"
METRICS = ["gpu__time_duration.sum", "dram__bytes.sum"]


def marker(call: int, tag: int, grid: tuple[int, int, int] | None = None) -> ActionRecord:
    return ActionRecord(
        index=-1, kernel=MARKER_KERNEL, annotation=None, call=None, values={}, units={},
        gpu="", compute_clock=0.0, memory_clock=0.0, grid=grid or (call + 1, tag, 1),
    )  # fmt: skip


def bare(rec: ActionRecord) -> ActionRecord:
    """The record as an attached report holds it: no NVTX state."""
    return dataclasses.replace(rec, call=None, annotation=None, nvtx={})


@dataclasses.dataclass
class Harnessed:
    """The sweep report as one harness run: its NVTX-tied records, the calls, and the stream an
    attached run would give (set-up kernel, BEGIN, the call's kernels, END, per call)."""

    tied: list[ActionRecord]
    calls: list[Call]
    stream: list[ActionRecord]


@pytest.fixture(scope="module")
def sweep() -> Harnessed:
    records = extract.read_actions(SWEEP / "report.ncu-rep", METRICS)
    manifest = json.loads((SWEEP / "manifest.json").read_text())
    tied: list[ActionRecord] = []
    calls: list[Call] = []
    stream: list[ActionRecord] = []
    keys: dict[tuple[int, str], int] = {}
    config_of = {c["call"]: c["config"] for c in manifest["calls"]}
    for rec in records:
        assert rec.call is not None and rec.annotation is not None  # recorded with NVTX
        key = (rec.call, rec.annotation)
        if key not in keys:
            if calls:
                stream.append(marker(calls[-1].call, END))
            keys[key] = len(calls)
            calls.append(Call(len(calls), config_of[rec.call], rec.call, [rec.annotation], []))
            stream += [bare(rec), marker(keys[key], BEGIN)]  # a set-up kernel, then the call
        tied.append(dataclasses.replace(rec, call=keys[key]))
        stream.append(bare(rec))
    stream.append(marker(calls[-1].call, END))
    return Harnessed(tied, calls, stream)


def test_markers_tie_the_kernels_nvtx_tied_and_the_rows_are_the_same(sweep: Harnessed) -> None:
    assert len(sweep.calls) == 18 and call_markers.needed(sweep.stream)
    counts = {(c.annotations[0], c.config): 1 for c in sweep.calls}  # one kernel per call
    tied = call_markers.assign_calls(sweep.stream, sweep.calls, counts)
    assert [(r.call, r.annotation, r.kernel, r.values) for r in tied] == [
        (r.call, r.annotation, r.kernel, r.values) for r in sweep.tied
    ]
    configs = [(4096,), (65536,), (1048576,)]

    def rows(records: list[ActionRecord]) -> pd.DataFrame:
        grouped = extract.group_kernels(records, sweep.calls)
        frame = extract.raw_frame(grouped, METRICS, configs, ["n"])
        return frame.drop(columns=["Host"])

    pd.testing.assert_frame_equal(rows(tied), rows(sweep.tied))


def test_a_report_with_nvtx_ranges_is_not_read_by_markers(sweep: Harnessed) -> None:
    with_ranges = [*sweep.tied, marker(0, BEGIN)]
    assert not call_markers.needed(with_ranges) and not call_markers.needed(sweep.tied)


def mutations(sweep: Harnessed) -> Iterator[tuple[str, list[ActionRecord], str]]:
    s = sweep.stream
    ends = [i for i, r in enumerate(s) if r.kernel == MARKER_KERNEL and r.grid and r.grid[1] == END]
    begins = [
        i for i, r in enumerate(s) if r.kernel == MARKER_KERNEL and r.grid and r.grid[1] == BEGIN
    ]
    yield "an end lost", s[: ends[3]] + s[ends[3] + 1 :], "call 4 began before call 3 ended"
    yield "the last end lost", s[:-1], "call 17 has no end marker"
    yield (
        "a call bracketed twice",
        [*s, marker(5, BEGIN), marker(5, END)],
        "call 5 was bracketed twice",
    )
    yield (
        "a call unknown",
        [*s, marker(40, BEGIN), marker(40, END)],
        "call 40, which the manifest lacks",
    )
    yield "a call unmarked", s[: begins[-1]], "1 call(s) without markers, the first call 17"
    yield "an end alone", [*s, marker(2, END)], "an end marker for call 2 outside its bracket"
    yield "a foreign grid", [*s, marker(0, BEGIN, grid=(1, 7, 1))], "has grid (1, 7, 1)"


CASES = ["an end lost", "the last end lost", "a call bracketed twice", "a call unknown",
         "a call unmarked", "an end alone", "a foreign grid"]  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_a_marker_stream_that_does_not_fit_is_refused_with_the_call_named(
    sweep: Harnessed, case: str
) -> None:
    stream, said = {name: (stream, said) for name, stream, said in mutations(sweep)}[case]
    with pytest.raises(MarkerMismatch, match=re.escape(said)):
        call_markers.assign_calls(stream, sweep.calls)


def test_a_call_holding_other_than_the_preflights_count_is_refused(sweep: Harnessed) -> None:
    counts = {(c.annotations[0], c.config): 1 for c in sweep.calls}
    counts[("triton_scale", 2)] = 2
    with pytest.raises(MarkerMismatch, match=r"\('triton_scale', config #2\) holds 1 kernel"):
        call_markers.assign_calls(sweep.stream, sweep.calls, counts)


def test_a_call_with_several_annotations_cannot_be_tied_by_its_markers(sweep: Harnessed) -> None:
    calls = [dataclasses.replace(sweep.calls[0], annotations=["a", "b"]), *sweep.calls[1:]]
    with pytest.raises(MarkerMismatch, match="call 0 opened 2 annotations"):
        call_markers.assign_calls(sweep.stream, calls)


def test_the_preflight_counts_kernels_per_variant_and_config_where_runs_agree() -> None:
    calls = [
        {"variant": "ref", "config": 0, "kernels": ["k"]},
        {"variant": "ref", "config": 0, "kernels": ["k"]},
        {"variant": "ref", "config": 1, "kernels": ["k", "splitk_reduce"]},
        {"variant": "new", "config": 0, "kernels": ["a"]},
        {"variant": "new", "config": 0, "kernels": ["a", "a"]},  # runs disagree: no count
        {"variant": "cpu", "config": 0, "kernels": None},  # not counted (a CPU pre-flight)
    ]
    assert preflight_run.kernel_counts({"calls": calls}) == {"ref": {0: 1, 1: 2}, "new": {}}


def test_an_attached_report_is_checked_before_its_rows_are_read(
    sweep: Harnessed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``attach.readable``: markers that fit pass; that do not, the job goes cold (the pool
    stays on); neither ranges nor markers, the pool turns off."""
    files = RunFiles.in_folder(tmp_path)
    manifest = {"calls": [dataclasses.asdict(c) for c in sweep.calls]}
    files.manifest.write_text(json.dumps(manifest))
    counts = {(c.annotations[0], c.config): 1 for c in sweep.calls}
    given: list[list[ActionRecord]] = [sweep.stream]
    monkeypatch.setattr(extract, "read_actions", lambda *a, **k: given[0])
    attach.readable(files, counts)
    given[0] = sweep.stream[:-1]
    with pytest.raises(attach.AttachFailed, match="call markers do not fit: call 17") as err:
        attach.readable(files, counts)
    assert not err.value.lasting
    given[0] = [bare(r) for r in sweep.tied]
    with pytest.raises(attach.AttachFailed, match="no NVTX call ranges and no call markers") as err:
        attach.readable(files, counts)
    assert err.value.lasting
    given[0] = sweep.tied
    attach.readable(files, counts)  # a report with NVTX ranges is read as a cold one


def test_the_harness_brackets_a_call_only_on_a_gpu_with_markers_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    launched: list[tuple[int, int]] = []

    def record(call: int, tag: int) -> None:
        launched.append((call, tag))

    def scope(start: bool) -> None:  # the profiler range ncu attaches with (START/STOP: -1/-2)
        launched.append((-1 if start else -2, 0))

    monkeypatch.delenv(harness_markers.ENV, raising=False)
    with harness_markers.around(3, "cuda", record, scope):
        pass
    monkeypatch.setenv(harness_markers.ENV, "1")
    with harness_markers.around(4, "cpu", record, scope):
        pass
    assert launched == []
    with pytest.raises(RuntimeError), harness_markers.around(5, "cuda:0", record, scope):
        launched.append((5, 0))  # the call's own kernel
        raise RuntimeError("the entry raised")
    assert launched == [(-1, 0), (5, BEGIN), (5, 0), (5, END), (-2, 0)]
    launched.clear()
    with harness_markers.around(7, "cuda", record, scope):
        launched.append((7, 0))
    assert launched == [(-1, 0), (7, BEGIN), (7, 0), (7, END), (-2, 0)]

    def broken(call: int, tag: int) -> None:  # the call broke the CUDA context
        if tag == END:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        launched.append((call, tag))

    launched.clear()
    with (
        pytest.raises(ValueError, match="the entry's own error"),
        harness_markers.around(6, "cuda", broken, scope),
    ):
        raise ValueError("the entry's own error")
    assert launched == [(-1, 0), (6, BEGIN), (-2, 0)]  # the END failed, the range still closed

    def no_begin(call: int, tag: int) -> None:  # the context was broken before this call
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    launched.clear()
    with (
        pytest.raises(RuntimeError, match="illegal memory access"),
        harness_markers.around(8, "cuda", no_begin, scope),
    ):
        launched.append((8, 0))
    assert launched == [(-1, 0), (-2, 0)]  # no call ran, no END, and the range is closed


def test_the_marker_kernel_is_a_real_triton_kernel_that_launches() -> None:
    """Under Triton's interpreter (no GPU here), the marker compiles and runs for any call."""
    code = (
        "from nsight_agent.engine.harness import call_markers as m\n"
        "m.launch(0, m.BEGIN); m.launch(41, m.END)\n"
        "print(m._kernel().fn.__name__)\n"
    )
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [MARKER_KERNEL]
    with pytest.raises(ValueError, match="no marker for call -1"):
        harness_markers.launch(-1, BEGIN)


def test_no_view_reads_a_call_marker_as_a_kernel() -> None:
    """An attached run's report holds the markers around each call; the extraction reads them
    (to tie kernels to calls), every view of the report (diagnosis, roofline, summary) skips
    them. On the H200 an attached roofline and diagnosis listed them before this."""
    names = [MARKER_KERNEL, "add_kernel", MARKER_KERNEL, MARKER_KERNEL, "scale_kernel"]
    actions = [FakeAction({}, name=n) for n in names]
    report = SimpleNamespace(
        num_ranges=lambda: 1,
        range_by_idx=lambda r: SimpleNamespace(
            num_actions=lambda: len(actions), action_by_idx=lambda a: actions[a]
        ),
    )
    assert [a.name() for a in extract.iter_actions(report)] == ["add_kernel", "scale_kernel"]
    assert [a.name() for a in extract.iter_actions(report, markers=True)] == names
