"""The fixed vocabulary of causes a kernel diagnosis may name.

Each entry says what the cause means, what to try, and which skill in ``skills/`` explains it.
``kind`` is "cause" for a defect that can be fixed, "roof" for a kernel at a hardware limit
(nothing to fix; only doing less of the limiting work helps). Symptoms (low issue-slot or pipe
utilisation, long-scoreboard stalls, low achieved occupancy) are not in the vocabulary: they are
evidence folded into the cause that explains them. docs/DIAGNOSIS.md lists the same table with
the evidence each check reads.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

CauseId = Literal[
    "uncoalesced_global_access",
    "shared_bank_conflicts",
    "too_few_blocks",
    "tail_effect",
    "occupancy_registers",
    "occupancy_shared_memory",
    "occupancy_block_size",
    "warp_divergence",
    "local_memory_spills",
    "tensor_cores_idle",
    "slow_precision",
    "launch_bound_tiny",
    "atomic_contention",
    "excess_dram_traffic",
    "memory_latency",
    "dram_at_roof",
    "compute_at_roof",
    "pipe_at_roof",
    "ncu_rule",
]
CauseKind = Literal["cause", "roof"]
Skill = Literal[
    "memory", "compute", "occupancy", "roofline", "timing", "tensor_cores", "launch_config"
]


class VocabularyEntry(BaseModel):
    """One cause of the vocabulary."""

    id: CauseId
    title: str = Field(description="A short name for people")
    kind: CauseKind = Field(description="cause: a defect to fix; roof: at a hardware limit")
    meaning: str = Field(description="What the cause means, in one line")
    actions: list[str] = Field(description="What to try, 2-4 concrete changes")
    skill: Skill = Field(description="The folder in skills/ that explains it")


def _e(
    id: CauseId, title: str, kind: CauseKind, meaning: str, actions: list[str], skill: Skill
) -> VocabularyEntry:
    return VocabularyEntry(
        id=id, title=title, kind=kind, meaning=meaning, actions=actions, skill=skill
    )


_ENTRIES = (
    _e(
        "uncoalesced_global_access",
        "Uncoalesced global access",
        "cause",
        "A warp's global loads/stores touch many more 32-byte sectors than the bytes it uses.",
        [
            "Make consecutive threads access consecutive addresses",
            "Transpose or gather through shared memory",
            "Use an SoA layout / vector loads of contiguous data",
        ],
        "memory",
    ),
    _e(
        "shared_bank_conflicts",
        "Shared-memory bank conflicts",
        "cause",
        "Threads of a warp hit the same shared-memory bank, so one access takes many wavefronts.",
        ["Pad each shared row by one element", "Swizzle the shared layout (XOR index)"],
        "memory",
    ),
    _e(
        "too_few_blocks",
        "Too few blocks for the GPU",
        "cause",
        "The grid has fewer blocks (or waves) than needed to keep every SM busy.",
        [
            "Launch at least 2x as many blocks as SMs",
            "Split the work finer (smaller tiles, split-K)",
            "Use smaller blocks so more of them exist",
        ],
        "launch_config",
    ),
    _e(
        "tail_effect",
        "Tail effect (partial last wave)",
        "cause",
        "The last wave of blocks fills only part of the GPU, which idles while it runs.",
        [
            "Size the grid to a multiple of the blocks one wave holds",
            "Use a persistent grid-stride loop over one full wave",
            "Make blocks smaller so the tail is a smaller share",
        ],
        "launch_config",
    ),
    _e(
        "occupancy_registers",
        "Occupancy limited by registers",
        "cause",
        "Registers per thread cap the resident warps too low to hide latency.",
        [
            "Cap registers (__launch_bounds__, maxrregcount, Triton num_warps)",
            "Keep fewer values live (smaller per-thread tiles, less unrolling)",
        ],
        "occupancy",
    ),
    _e(
        "occupancy_shared_memory",
        "Occupancy limited by shared memory",
        "cause",
        "Shared memory per block caps the resident blocks too low to hide latency.",
        [
            "Use smaller shared tiles or fewer pipeline stages",
            "Reuse one shared buffer across phases",
            "Store shared tiles in a narrower type",
        ],
        "occupancy",
    ),
    _e(
        "occupancy_block_size",
        "Occupancy limited by block size",
        "cause",
        "The block size wastes warp slots (blocks-per-SM cap, or not a multiple of 32).",
        [
            "Use 128-256 threads per block, a multiple of 32",
            "Give each thread more work instead of tiny blocks",
        ],
        "occupancy",
    ),
    _e(
        "warp_divergence",
        "Warp divergence",
        "cause",
        "Threads of a warp take different branches, so many lanes idle per instruction.",
        [
            "Make branch conditions uniform per warp (sort or bin work)",
            "Replace branches with predicated arithmetic",
            "Give each warp one kind of work",
        ],
        "compute",
    ),
    _e(
        "local_memory_spills",
        "Local-memory spills",
        "cause",
        "Registers spill (or an array is dynamically indexed) to slow local memory.",
        [
            "Raise the register cap if occupancy allows",
            "Cut live values (smaller tiles, less unrolling)",
            "Index per-thread arrays with compile-time constants",
        ],
        "memory",
    ),
    _e(
        "tensor_cores_idle",
        "Tensor cores idle in matmul-shaped work",
        "cause",
        "The kernel does matmul-like FMA work with data reuse on CUDA cores; tensor cores sit idle.",
        [
            "Use mma/wgmma (CUTLASS, cuBLAS) or tl.dot in Triton",
            "Compute in bf16/fp16/tf32 inputs with fp32 accumulation",
            "Stage tiles in shared memory in an MMA-friendly layout",
        ],
        "tensor_cores",
    ),
    _e(
        "slow_precision",
        "A slower precision than needed",
        "cause",
        "fp64 arithmetic dominates; the inputs or the accuracy may not need it.",
        [
            "Check fp64 is needed; use fp32 (2x the rate, half the bytes)",
            "Avoid implicit double promotion (use 1.0f, sqrtf, expf)",
            "Keep fp64 only for the accumulation that needs it",
        ],
        "compute",
    ),
    _e(
        "launch_bound_tiny",
        "Launch-bound tiny kernel",
        "cause",
        "The kernel runs a few microseconds: launch cost is a large share of its time.",
        [
            "Fuse it with its neighbours",
            "Capture the sequence in a CUDA graph",
            "Batch several small problems into one launch",
        ],
        "launch_config",
    ),
    _e(
        "atomic_contention",
        "Atomic contention",
        "cause",
        "Many threads update the same addresses with atomics, serialising in L2.",
        [
            "Reduce within the warp/block first, then one atomic per block",
            "Privatise counters (per-block copies in shared memory)",
            "Spread updates over more addresses",
        ],
        "memory",
    ),
    _e(
        "excess_dram_traffic",
        "More DRAM bytes than needed",
        "cause",
        "The kernel moves clearly more DRAM bytes than its inputs and outputs need.",
        [
            "Read each input once: tile for reuse in shared memory",
            "Fuse with the producer/consumer kernel",
            "Use narrower types where accuracy allows",
        ],
        "memory",
    ),
    _e(
        "memory_latency",
        "Memory latency not hidden",
        "cause",
        "Warps wait on memory but too few bytes are in flight to saturate any unit.",
        [
            "Give each thread more independent loads (unroll, vectorise)",
            "Raise occupancy or prefetch (cp.async / TMA pipelining)",
            "Use a bigger grid",
        ],
        "memory",
    ),
    _e(
        "dram_at_roof",
        "At the DRAM roof",
        "roof",
        "DRAM bandwidth is near its peak: only moving fewer bytes helps.",
        [
            "Move fewer bytes: fuse kernels, narrower types, compression",
            "Reuse data on chip (tiling) if inputs are re-read",
        ],
        "roofline",
    ),
    _e(
        "compute_at_roof",
        "At the compute roof",
        "roof",
        "The precision's FLOP rate is near its peak: only less or cheaper math helps.",
        [
            "Use a faster precision/unit (tensor cores, bf16/fp8)",
            "Do less arithmetic (algorithmic change, skip zeros)",
        ],
        "roofline",
    ),
    _e(
        "pipe_at_roof",
        "At a pipe's roof",
        "roof",
        "One of the SM's non-FLOP pipes (integer ALU, special functions, load/store, branch, "
        "uniform) issues near its peak: only fewer instructions on that pipe help.",
        [
            "Issue fewer instructions on the busy pipe (the note names it and what it runs)",
            "Move work to an idle pipe (FMA for polynomial approximations, integer math as FP)",
        ],
        "compute",
    ),
    _e(
        "ncu_rule",
        "ncu's own finding",
        "cause",
        "None of our checks fired, but one of ncu's rules estimates a sizeable gain: passed "
        "through with ncu's estimate and advice, marked as ncu's.",
        [
            "Follow ncu's own advice, the rule's sentence that says what to do",
            "Read the rule's full text and evidence (get_run(..., 'findings'))",
        ],
        "roofline",
    ),
)

VOCABULARY: dict[CauseId, VocabularyEntry] = {e.id: e for e in _ENTRIES}
