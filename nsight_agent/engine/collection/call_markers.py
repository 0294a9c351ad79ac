"""Extraction without NVTX: the kernels of an attached run tied to their calls by the
harness's call markers (``harness/call_markers.py``).

ncu profiles kernels in launch order. A kernel between call N's BEGIN and END markers is call
N's and takes the one annotation (variant) the manifest lists for it; kernels outside every
bracket (set-up, correctness checks, warm-up) are dropped, and so are the markers. Anything
that does not fit (a bracket opened twice, left open, for a call the manifest does not list,
around a call with several annotations, or a kernel count other than the pre-flight's) raises
``MarkerMismatch``: the attach path then profiles the job cold and says why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from nsight_agent.engine.collection.extract import ActionRecord, Call
from nsight_agent.engine.harness.call_markers import BEGIN, END, MARKER_KERNEL

# (variant, config index) -> kernels the pre-flight counted in each of its calls
KernelCounts = Mapping[tuple[str, int], int]


class MarkerMismatch(Exception):
    """The report's markers do not tie its kernels to the manifest's calls; says why."""


def present(records: Sequence[ActionRecord]) -> bool:
    return any(r.kernel == MARKER_KERNEL for r in records)


def needed(records: Sequence[ActionRecord]) -> bool:
    """Whether the report must be read by markers: no kernel carries an NVTX call range."""
    return present(records) and all(r.call is None for r in records)


def assign_calls(
    records: Sequence[ActionRecord], calls: Sequence[Call], expected: KernelCounts | None = None
) -> list[ActionRecord]:
    """The kernels of the measured calls, each with its call and annotation, in launch order."""
    by_call = {c.call: c for c in calls}
    tied: list[ActionRecord] = []
    counts: dict[int, int] = {}
    open_call: int | None = None
    for rec in records:
        if rec.kernel != MARKER_KERNEL:
            if open_call is not None:
                call = by_call[open_call]
                tied.append(replace(rec, call=call.call, annotation=call.annotations[0]))
                counts[open_call] += 1
            continue
        call_index, tag = _decode(rec)
        if tag == BEGIN:
            if open_call is not None:
                raise MarkerMismatch(f"call {call_index} began before call {open_call} ended")
            if call_index not in by_call:
                raise MarkerMismatch(f"a marker for call {call_index}, which the manifest lacks")
            if call_index in counts:
                raise MarkerMismatch(f"call {call_index} was bracketed twice")
            if len(by_call[call_index].annotations) != 1:
                raise MarkerMismatch(
                    f"call {call_index} opened {len(by_call[call_index].annotations)} "
                    "annotations; a marker brackets a call, not the annotations inside it"
                )
            open_call, counts[call_index] = call_index, 0
        elif open_call != call_index:
            raise MarkerMismatch(f"an end marker for call {call_index} outside its bracket")
        else:
            open_call = None
    if open_call is not None:
        raise MarkerMismatch(f"call {open_call} has no end marker (the run ended inside it?)")
    unmarked = [c.call for c in calls if c.call not in counts]
    if unmarked:
        raise MarkerMismatch(
            f"{len(unmarked)} call(s) without markers, the first call {unmarked[0]}"
        )
    _check_counts(counts, by_call, expected or {})
    return tied


def _decode(rec: ActionRecord) -> tuple[int, int]:
    if rec.grid is None:
        raise MarkerMismatch(f"marker kernel #{rec.index} without its grid in the report")
    x, tag, z = rec.grid
    if x < 1 or tag not in (BEGIN, END) or z != 1:
        raise MarkerMismatch(f"marker kernel #{rec.index} has grid {rec.grid}, not a marker's")
    return x - 1, tag


def _check_counts(
    counts: dict[int, int], by_call: Mapping[int, Call], expected: KernelCounts
) -> None:
    """Each measured call holds as many kernels as the pre-flight counted for its variant and
    config (a marker lost or a kernel launched on a stream the markers do not order shows here)."""
    for index, n in counts.items():
        call = by_call[index]
        want = expected.get((call.annotations[0], call.config))
        if want is not None and want != n:
            raise MarkerMismatch(
                f"call {index} ({call.annotations[0]!r}, config #{call.config}) holds {n} "
                f"kernel(s) between its markers; the pre-flight counted {want}"
            )
