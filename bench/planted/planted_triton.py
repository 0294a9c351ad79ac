"""Planted-bottleneck kernels written in Triton (see bench/planted/README.md).

Each kernel carries exactly one planted defect, or none for the controls.
run_kernel.py launches them; record-planted profiles one launch of each.
"""

import triton
import triton.language as tl


# uncoalesced_global_access: out[i] = x[(i % rows) * 32 + i // rows]; neighbouring
# lanes read elements 128 bytes apart, so each warp load touches 32 sectors.
@triton.jit
def planted_tl_strided_gather(x_ptr, out_ptr, n, ROWS_SHIFT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    src = (offs & ((1 << ROWS_SHIFT) - 1)) * 32 + (offs >> ROWS_SHIFT)
    v = tl.load(x_ptr + src, mask=mask)
    tl.store(out_ptr + offs, v, mask=mask)


# too_few_blocks: a clean axpy loop, but launched on 4 programs only.
@triton.jit
def planted_tl_few_programs(x_ptr, y_ptr, n, a, NPROG: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    for start in range(pid * BLOCK, n, NPROG * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        tl.store(y_ptr + offs, a * x + y, mask=mask)


# tensor_cores_idle: fp16 matmul C = A @ B (A given transposed, K x M) computed as a
# sum of fp32 outer products acc += a[:, None] * b[None, :], one k at a time, instead
# of tl.dot: it runs on the FMA pipe with the tensor cores idle. (The form
# tl.sum(a[:, :, None] * b[None, :, :], axis=1) is NOT used: Triton rewrites it to a dot.)
@triton.jit
def planted_tl_outer_matmul(at_ptr, b_ptr, c_ptr, M, N, K,
                            BM: tl.constexpr, BN: tl.constexpr, UNROLL: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, UNROLL):
        for kk in tl.static_range(UNROLL):
            a = tl.load(at_ptr + (k0 + kk) * M + rm).to(tl.float32)
            b = tl.load(b_ptr + (k0 + kk) * N + rn).to(tl.float32)
            acc += a[:, None] * b[None, :]
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


# slow_precision: fp32 in and out, but the loop runs four fp64 FMA chains.
@triton.jit
def planted_tl_fp64_math(x_ptr, out_ptr, n, iters, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(x_ptr + offs, mask=mask).to(tl.float64)
    b = a + 1.0
    c = a + 2.0
    d = a + 3.0
    for _ in range(iters):
        a = a * 0.999999 + 1e-6
        b = b * 0.999998 + 2e-6
        c = c * 0.999997 + 3e-6
        d = d * 0.999996 + 4e-6
    tl.store(out_ptr + offs, (a + b + c + d).to(tl.float32), mask=mask)


# atomic_contention: every element is atomically added to ONE address.
@triton.jit
def planted_tl_atomic_one(x_ptr, sum_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.atomic_add(sum_ptr + tl.zeros([BLOCK], dtype=tl.int32), x, mask=mask)


# launch_bound_tiny: one program, 64 elements.
@triton.jit
def planted_tl_tiny(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 1.5 + 1.0, mask=mask)


# control (DRAM roof): a plain copy with large blocks.
@triton.jit
def control_tl_copy(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


# control (tensor roof): a bf16 tl.dot matmul with a grouped launch order.
@triton.jit
def control_tl_dot(a_ptr, b_ptr, c_ptr, M, N, K,
                   BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BM)
    num_n = tl.cdiv(N, BN)
    per_group = GROUP * num_n
    group = pid // per_group
    first_m = group * GROUP
    size_m = tl.minimum(num_m - first_m, GROUP)
    pid_m = first_m + (pid % per_group) % size_m
    pid_n = (pid % per_group) // size_m
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * K + rk[None, :]
    b_ptrs = b_ptr + rk[:, None] * N + rn[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in range(0, K, BK):
        acc += tl.dot(tl.load(a_ptrs), tl.load(b_ptrs))
        a_ptrs += BK
        b_ptrs += BK * N
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(c_ptr.dtype.element_ty))


# foreign NVTX: a clean scale kernel, launched inside another tool's NVTX range.
@triton.jit
def nvtx_tl_scale(x_ptr, n, s, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) * s, mask=mask)


# ======================================================================= held-out kernels
# Recorded once and never used to tune the diagnosis rules ("split": "held_out" in
# catalog.json); written the way a user might write them, one defect each (none for the
# control), different in shape and code from the tuning kernels above.


# held out, excess_dram_traffic: layer norm over wide rows (256 Ki floats, 1 MiB) in the
# three-loop form (mean, variance, normalise). Each loop streams the row from global
# memory again; with ~1000 programs resident, 1 GiB is in flight between two reads of one
# row, far more than L2 holds, so x comes from DRAM three times.
@triton.jit
def ho_tl_layernorm_wide(x_ptr, y_ptr, w_ptr, b_ptr, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row.to(tl.int64) * N
    y_row = y_ptr + row.to(tl.int64) * N
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        acc += tl.load(x_row + cols, mask=cols < N, other=0.0)
    mean = tl.sum(acc, axis=0) / N
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < N, other=0.0)
        d = tl.where(cols < N, x - mean, 0.0)
        acc += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0)
        w = tl.load(w_ptr + cols, mask=mask)
        b = tl.load(b_ptr + cols, mask=mask)
        tl.store(y_row + cols, (x - mean) * rstd * w + b, mask=mask)


# held out, too_few_blocks: sum of each row of a 32 x 4 Mi matrix with one program per
# row: 32 programs on a 132-SM GPU.
@triton.jit
def ho_tl_row_sum(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * N + cols, mask=cols < N, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


# held out, atomic_contention: a 16-bin histogram built with one global atomic per
# element: every program hammers the same 16 counters.
@triton.jit
def ho_tl_histogram(x_ptr, hist_ptr, n, NBINS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    b = tl.minimum((x * NBINS).to(tl.int32), NBINS - 1)
    tl.atomic_add(hist_ptr + b, 1, mask=mask)


# held out, launch_bound_tiny: bias add on a 4 x 256 activation, one program per row.
@triton.jit
def ho_tl_bias_add(x_ptr, bias_ptr, y_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask)
    tl.store(y_ptr + row * N + cols, x + tl.load(bias_ptr + cols, mask=mask), mask=mask)


# held out, control (DRAM roof): SiLU, y = x * sigmoid(x), on fp32.
@triton.jit
def ho_tl_silu(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x * tl.sigmoid(x), mask=mask)


# ------------------------------------------------------------ more planted kernels
# fp16_nodot (tuning): a half-precision GEMM tile written as a broadcast multiply and a sum
# over k instead of tl.dot: every MAC is a CUDA-core FMA, the tensor cores stay idle.
@triton.jit
def planted_tl_gemm_nodot(a_ptr, b_ptr, c_ptr, M, N, K,
                          BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :])
        b = tl.load(b_ptr + (k0 + rk)[:, None] * N + rn[None, :])
        acc += tl.sum(a[:, :, None].to(tl.float32) * b[None, :, :].to(tl.float32), axis=1)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(c_ptr.dtype.element_ty))


# half_wave (held out): a scalar grid-stride scale-and-add with a fixed program count of
# 2 x SMs and 8 warps each: more programs than SMs, but a fraction of one resident wave.
@triton.jit
def ho_tl_half_wave(x_ptr, y_ptr, n, a, NPROG: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    for start in range(pid * BLOCK, n, NPROG * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        tl.store(y_ptr + offs, a * x + y, mask=mask)


# fp16_nodot (held out): a bf16 GEMM as k rank-1 updates in bf16 arithmetic, one k per step.
@triton.jit
def ho_tl_rank1_update(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K):
        a = tl.load(a_ptr + rm * K + k).to(tl.float32)
        b = tl.load(b_ptr + k * N + rn).to(tl.float32)
        acc += a[:, None] * b[None, :]
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(c_ptr.dtype.element_ty))


# ------------------------------------------------------------ held out: the matmul set
# Written with their expected causes before any was recorded, after idle tensor cores were
# ranked above the operand feed's memory symptoms; recorded once and never used to tune a
# rule ("split": "held_out_matmul"). Two GEMMs without tl.dot in other shapes, dtypes and
# access than the ones above, a matrix-vector product (multiply-accumulate with no reuse: not
# a matmul) and a row softmax (a control whose stall samples fall in Triton's reductions).


# tensor_cores_idle: a linear layer y = x W^T in fp32, W stored out_features x in_features as
# torch.nn.Linear keeps it, as K rank-1 updates: each step reads a column of x and a column
# of W^T (a row of W per output feature), in_features floats apart between neighbours.
@triton.jit
def hom_tl_linear_nodot(x_ptr, w_ptr, y_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K):
        xk = tl.load(x_ptr + rm * K + k)
        wk = tl.load(w_ptr + rn * K + k)
        acc += xk[:, None] * wk[None, :]
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc)


# tensor_cores_idle: attention scores S = Q K^T * scale for every (batch, head), fp16 in and
# out, head dim 64, summed over the head dim one element at a time on the CUDA cores.
@triton.jit
def hom_tl_scores_nodot(q_ptr, k_ptr, s_ptr, seq, scale,
                        HEAD: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    bh = tl.program_id(2).to(tl.int64)
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    q_base = q_ptr + bh * seq * HEAD
    k_base = k_ptr + bh * seq * HEAD
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for d in range(0, HEAD):
        q = tl.load(q_base + rm * HEAD + d).to(tl.float32)
        k = tl.load(k_base + rn * HEAD + d).to(tl.float32)
        acc += q[:, None] * k[None, :]
    out = s_ptr + bh * seq * seq + rm[:, None] * seq + rn[None, :]
    tl.store(out, (acc * scale).to(tl.float16))


# uncoalesced_global_access: y = A x with a block of rows per program walking the columns:
# at each step the lanes read one column of A, a row (K floats) apart. Multiply-accumulate
# with no reuse of A: not a matmul, so no tensor-core cause.
@triton.jit
def hom_tl_gemv_cols(a_ptr, x_ptr, y_ptr, M, K, BM: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    acc = tl.zeros((BM,), dtype=tl.float32)
    for k in range(0, K):
        acc += tl.load(a_ptr + rm * K + k) * tl.load(x_ptr + k)
    tl.store(y_ptr + rm, acc)


# control (DRAM roof): a row softmax as Triton's tutorial writes it, one row per program.
@triton.jit
def hom_tl_softmax(out_ptr, in_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * n_cols + cols, mask=mask, other=-float("inf"))
    shifted = x - tl.max(x, axis=0)
    numerator = tl.exp(shifted)
    denominator = tl.sum(numerator, axis=0)
    tl.store(out_ptr + row * n_cols + cols, numerator / denominator, mask=mask)
