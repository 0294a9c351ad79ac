"""Errors say it once, say where, and give the hint that fits the failure."""

from __future__ import annotations

from nsight_agent.engine.harness.errors import KERNELS_EXTRA, SourceError
from nsight_agent.errors import UnknownMetricError


def test_a_wrapped_source_error_says_its_stage_once() -> None:
    inner = SourceError("import", "NameError: x", line=5, file="user_source.py")
    outer = SourceError("import", str(inner.message), line=5)
    assert outer.message == "import failed (source line 5): NameError: x"
    entry = SourceError("entry", "RuntimeError: boom", line=7, variant="run", config_index=0)
    again = SourceError("entry", entry.message)
    assert again.message == "entry failed: RuntimeError: boom"
    assert SourceError.from_json(again.to_dict()).message == again.message


def test_hints_fit_the_failure() -> None:
    missing = SourceError("import", "ModuleNotFoundError: No module named 'torch'", line=1)
    assert KERNELS_EXTRA in missing.hint
    triton = SourceError("import", "ModuleNotFoundError: No module named 'triton'", line=2)
    assert KERNELS_EXTRA in triton.hint and "Triton" in triton.hint
    crash = SourceError("entry", "CUDA error: an illegal memory access was encountered")
    assert "out of bounds" in crash.hint and "line shown" not in crash.hint
    nothing = SourceError("entry", "variant 'v', config #0: the entry launched no CUDA kernel")
    assert "memcpy" in nothing.hint and "line shown" not in nothing.hint
    at_line = SourceError("entry", "ValueError: bad", line=9)
    assert "line shown" in at_line.hint
    without_line = SourceError("entry", "ValueError: bad")
    assert "line shown" not in without_line.hint


def test_unknown_metrics_always_come_with_close_matches() -> None:
    err = UnknownMetricError("dram__bytes_reed.sum", ["dram__bytes_read.sum"], "Unknown metric.")
    assert "Close matches: dram__bytes_read.sum" in str(err)
    plain = UnknownMetricError("x", ["y"])
    assert str(plain).startswith("Unknown metric 'x'. Close matches: y.")
    assert "Close matches" not in str(UnknownMetricError("x", [], "Unknown metric."))


def _subclasses(cls: type) -> list[type]:
    return [cls, *(s for sub in cls.__subclasses__() for s in _subclasses(sub))]


def test_every_error_survives_a_pickle_with_its_class_text_and_fields() -> None:
    """An error crossing a process (a pool, an executor) keeps its class and what it carries,
    whatever its __init__ takes: UnknownMetricError's metric is what diagnose_kernel reads to
    fall back from a counter ncu refused."""
    import pickle

    import nsight_agent.engine.executors.ray.cluster  # noqa: F401 - its errors too
    from nsight_agent.errors import NsightAgentError

    err = UnknownMetricError("a__b.sum", ["a__b.max"])
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is UnknownMetricError and str(back) == str(err)
    assert (back.metric, back.suggestions, back.hint) == ("a__b.sum", ["a__b.max"], err.hint)
    for cls in _subclasses(NsightAgentError):
        plain = cls.__new__(cls)
        NsightAgentError.__init__(plain, f"{cls.__name__} failed", "do this")
        again = pickle.loads(pickle.dumps(plain))
        assert type(again) is cls and str(again) == str(plain), cls
        assert again.message == plain.message and again.hint == "do this", cls
