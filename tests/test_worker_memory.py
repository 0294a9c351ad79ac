"""A warm worker hands the GPU memory a finished job freed back to the driver, so large
problems served in turn do not run it out of memory; on a CPU it touches nothing."""

from __future__ import annotations

import sys
import types

import pytest

from nsight_agent.engine.worker import main


class _Cuda:
    def __init__(self) -> None:
        self.emptied = 0

    def empty_cache(self) -> None:
        self.emptied += 1


def _stub_torch(monkeypatch: pytest.MonkeyPatch) -> _Cuda:
    cuda = _Cuda()
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    return cuda


def test_a_cuda_worker_empties_the_allocator_cache_after_a_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cuda = _stub_torch(monkeypatch)
    collected: list[int] = []
    monkeypatch.setattr(main.gc, "collect", lambda: collected.append(1) or 0)
    main.release_memory("cuda:0")
    assert cuda.emptied == 1 and collected == [1]


def test_a_cpu_worker_releases_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    cuda = _stub_torch(monkeypatch)
    main.release_memory("cpu")
    assert cuda.emptied == 0


def test_a_worker_without_torch_releases_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    main.release_memory("cuda:0")  # nothing to call: no error
    assert "torch" not in sys.modules
