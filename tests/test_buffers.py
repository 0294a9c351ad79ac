"""Buffers stay as set up: when setup ignores the seed, the harness refills the
inputs that carry data, never a constant tensor (an accumulator, a zero-initialised output, a
mask) and never an integer one, and says how many it refilled and what it kept. Through the
real timing path on the CPU, and the integrity functions themselves."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from nsight_agent.engine import pipeline
from nsight_agent.engine.harness import integrity
from nsight_agent.engine.worker.pool import WorkerPool
from nsight_agent.request import ProfileRequest
from nsight_agent.service.summaries import compare_summary

# setup seeds a generator of its own (so two seeds give the same data), and hands an
# accumulator that must start at zero: atomic-add style accumulation into it.
ACCUMULATOR = """
import torch

def setup(n, device="cpu"):
    g = torch.Generator().manual_seed(7)
    data = torch.rand(n, generator=g).to(device)
    index = torch.randint(0, 8, (n,), generator=g).to(device)
    return data, index, torch.zeros(8, device=device)

def run(data, index, acc):
    assert bool((acc == 0).all()), "the accumulator was refilled"
    return acc.index_add(0, index, data)

def again(data, index, acc):
    assert bool((acc == 0).all()), "the accumulator was refilled"
    return acc.index_add(0, index, data)
"""


def test_a_constant_tensor_is_a_buffer_and_data_is_still_refilled() -> None:
    data, acc, ones = torch.rand(16), torch.zeros(16), torch.ones(4)
    index = torch.arange(4)
    before = data.clone()
    integrity.vary([data, acc, ones, index], seed=3)
    assert not torch.equal(data, before)  # a float data input is still refilled
    assert torch.equal(acc, torch.zeros(16)) and torch.equal(ones, torch.ones(4))
    assert torch.equal(index, torch.arange(4))
    note = integrity.vary_note([data, acc, ones, index])
    assert "refilled 1 floating-point input " in note and "2 constant ones" in note, note


def test_only_buffers_means_nothing_to_vary() -> None:
    """setup returning torch.zeros(n): identical under any seed because it is a buffer."""
    assert not integrity.seed_ignored((torch.zeros(8),), (torch.zeros(8),))
    assert integrity.seed_ignored((torch.ones(8) * torch.arange(8),), (torch.arange(8.0),))


def test_inputs_compare_in_chunks_like_torch_equal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two builds compared chunk by chunk on their device: a difference in the last element,
    on a chunk boundary or in a non-contiguous view is found; equal builds stay equal."""
    monkeypatch.setattr(integrity, "EQUAL_CHUNK", 7)
    a = torch.rand(5, 9)
    assert integrity.same_values((a,), (a.clone(),))
    for at in (0, 6, 7, 44):
        b = a.clone()
        b.view(-1)[at] += 1.0
        assert not integrity.same_values((a,), (b,)), at
    assert integrity.equal_tensors(a.t(), a.clone().t())
    assert not integrity.equal_tensors(a.t(), a.t().contiguous() + 1.0)
    assert not integrity.seed_ignored((torch.rand(50),), (torch.rand(50),))


def test_an_accumulator_kernel_compares_within_noise_and_is_not_refilled(tmp_path: Path) -> None:
    request = ProfileRequest(
        source=ACCUMULATOR,
        language="torch",
        configs=[{"n": 4096}],
        runs=5,
        variants=[{"name": "run"}, {"name": "again", "entry": "again"}],
    )
    with WorkerPool() as pool:
        run = pipeline.time_request(request, pool, runs_root=tmp_path)
    assert not run.dropped, run.dropped  # neither entry saw a refilled accumulator
    assert all(c.ok for c in run.checks), run.checks
    note = next(w for w in run.warnings if "setup ignores the seed" in w)
    assert "refilled 1 floating-point input " in note and "1 constant one " in note, note


# A zero-initialised output written sparsely: only every fourth element is written, so the
# result equals the dense rewrite's only if the output stays as set up (zeros).
SPARSE = """
import torch

def setup(n, device="cpu"):
    g = torch.Generator().manual_seed(7)
    return torch.rand(n, generator=g).to(device), torch.zeros(n, device=device)

def run(data, out):
    out[::4] = data[::4] * 2
    return out

def dense(data, out):
    result = torch.zeros_like(data)
    result[::4] = data[::4] * 2
    return result
"""


def test_a_sparse_writer_s_zero_output_is_kept_and_matches_a_dense_rewrite(
    tmp_path: Path,
) -> None:
    request = ProfileRequest(
        source=SPARSE,
        language="torch",
        configs=[{"n": 4096}],
        runs=5,
        variants=[{"name": "run"}, {"name": "dense", "entry": "dense"}],
    )
    with WorkerPool() as pool:
        run = pipeline.time_request(request, pool, runs_root=tmp_path)
    assert not run.dropped, run.dropped
    # Refilled, the untouched three quarters would be random and differ from the rewrite's zeros.
    assert [c.ok for c in run.checks] == [True, True], run.checks
    note = next(w for w in run.warnings if "setup ignores the seed" in w)
    assert "refilled 1 floating-point input " in note and "1 constant one " in note, note


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["timing", "ncu"])
def test_on_a_gpu_an_atomic_accumulator_is_kept_and_compares_within_noise(
    method: str, tmp_path: Path
) -> None:
    """index_add on CUDA accumulates with atomics into the zero buffer: not refilled, the data
    still is, and the same entry twice is within noise on both methods."""
    request = ProfileRequest(
        source=ACCUMULATOR,
        language="torch",
        configs=[{"n": 1 << 22}],
        runs=10,
        variants=[{"name": "run"}, {"name": "again", "entry": "again"}],
    )
    if method == "ncu":
        run = pipeline.profile(request, runs_root=tmp_path)
    else:
        with WorkerPool() as pool:
            run = pipeline.time_request(request, pool, runs_root=tmp_path, device="cuda:0")
    assert not run.dropped, run.dropped
    assert all(c.ok for c in run.checks), run.checks
    note = next(w for w in run.warnings if "setup ignores the seed" in w)
    assert "refilled 1 floating-point input " in note and "1 constant one " in note, note
    overall = compare_summary(run).overall
    assert overall["again"].verdict == "within_noise", overall
