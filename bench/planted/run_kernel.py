"""Launch one planted Triton or torch kernel three times (record-planted profiles the third).

Usage: python3 run_kernel.py <id>        (ids: catalog.json entries of language triton/torch)
With TRITON_INTERPRET=1 and --small it runs tiny sizes on the CPU, as a smoke test.
"""

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
import triton

sys.path.insert(0, os.path.dirname(__file__) or ".")
if TYPE_CHECKING:  # run as a script, this folder is on sys.path; mypy reads the package
    from bench.planted import planted_triton as pt
else:
    import planted_triton as pt

LAUNCHES = 3
SMS = 132


def main(argv: list[str]) -> None:
    kid = argv[1]
    small = "--small" in argv
    dev = "cpu" if small else "cuda"

    def rand(n: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.rand(n, device=dev, dtype=torch.float32).to(dtype)

    def launch(fn: Callable[[], object]) -> None:
        for _ in range(LAUNCHES):
            fn()

    if kid == "uncoalesced_triton":
        shift = 4 if small else 21
        n = 32 << shift
        x, out = rand(n), torch.empty(n, device=dev)
        launch(
            lambda: pt.planted_tl_strided_gather[(triton.cdiv(n, 1024),)](
                x, out, n, ROWS_SHIFT=shift, BLOCK=1024
            )
        )
        if small:
            ref = x.view(1 << shift, 32).t().reshape(-1)
            assert torch.equal(out, ref), "gather mismatch"
    elif kid == "too_few_blocks_triton":
        n = 4096 if small else 32 << 20
        x, y = rand(n), rand(n)
        launch(
            lambda: pt.planted_tl_few_programs[(4,)](
                x, y, n, 0.5, NPROG=4, BLOCK=1024 if not small else 256, num_warps=4
            )
        )
    elif kid == "tensor_idle_triton":
        m = 64 if small else 2048
        at, b = (
            rand(m * m, torch.float16).view(m, m),
            rand(m * m, torch.float16).view(m, m),
        )  # at = A^T
        c = torch.empty(m, m, device=dev)
        bm, bn = (32, 32) if small else (64, 128)
        launch(
            lambda: pt.planted_tl_outer_matmul[(m // bm, m // bn)](
                at, b, c, m, m, m, BM=bm, BN=bn, UNROLL=4, num_warps=4
            )
        )
        if small:
            assert torch.allclose(c, at.float().t() @ b.float(), atol=1e-2, rtol=1e-3), (
                "matmul mismatch"
            )
    elif kid == "slow_precision_triton":
        n = 1024 if small else 8 * SMS * 2 * 256
        x, out = rand(n), torch.empty(n, device=dev)
        iters = 4 if small else 2000
        launch(
            lambda: pt.planted_tl_fp64_math[(triton.cdiv(n, 256),)](
                x, out, n, iters, BLOCK=256, num_warps=8
            )
        )
    elif kid == "atomic_triton":
        n = 4096 if small else 8 << 20
        x, s = rand(n), torch.zeros(1, device=dev)
        launch(lambda: pt.planted_tl_atomic_one[(triton.cdiv(n, 1024),)](x, s, n, BLOCK=1024))
        if small:
            assert torch.allclose(s, x.sum() * LAUNCHES, rtol=1e-4), "atomic sum mismatch"
    elif kid == "tiny_launch_triton":
        x = rand(64)
        launch(lambda: pt.planted_tl_tiny[(1,)](x, 64, BLOCK=64, num_warps=1))
    elif kid == "control_copy_triton":
        n = 1 << 14 if small else 256 << 20  # 1 GiB of fp32 in, 1 GiB out
        x, out = rand(n), torch.empty(n, device=dev)
        launch(
            lambda: pt.control_tl_copy[(triton.cdiv(n, 4096),)](x, out, n, BLOCK=4096, num_warps=8)
        )
        if small:
            assert torch.equal(x, out)
    elif kid == "control_dot_triton":
        m = 128 if small else 8192
        dt = torch.float16 if small else torch.bfloat16  # the interpreter mishandles bf16 loads
        a = torch.randn(m, m, device=dev).to(dt)
        b = torch.randn(m, m, device=dev).to(dt)
        c = torch.empty(m, m, device=dev, dtype=dt)
        bm, bn, bk = (32, 32, 32) if small else (128, 256, 64)
        grid = (triton.cdiv(m, bm) * triton.cdiv(m, bn),)
        launch(
            lambda: pt.control_tl_dot[grid](
                a, b, c, m, m, m, BM=bm, BN=bn, BK=bk, GROUP=8, num_warps=8, num_stages=3
            )
        )
        if small:
            assert torch.allclose(c.float(), a.float() @ b.float(), atol=0.5, rtol=0.05)
    elif kid == "control_cublas_bf16":
        m = 8192
        a = torch.randn(m, m, device=dev, dtype=torch.bfloat16)
        b = torch.randn(m, m, device=dev, dtype=torch.bfloat16)
        launch(lambda: torch.matmul(a, b))
    elif kid == "foreign_nvtx":
        n = 4096 if small else 64 << 20
        x = rand(n)

        def step() -> None:
            if not small:  # default NVTX domain, a range named as another tool would name it
                torch.cuda.nvtx.range_push("other_tool:step")  # type: ignore[no-untyped-call]
            pt.nvtx_tl_scale[(triton.cdiv(n, 4096),)](x, n, 0.999, BLOCK=4096, num_warps=8)
            if not small:
                torch.cuda.nvtx.range_pop()  # type: ignore[no-untyped-call]

        launch(step)
    # ------------------------------------------------------------ held-out kernels
    elif kid == "layernorm_wide_triton":
        rows, n = (4, 3000) if small else (1024, 256 << 10)  # 1 GiB of fp32 in, 1 GiB out
        x, w, b = rand(rows * n), rand(n), rand(n)
        y = torch.empty(rows * n, device=dev)
        launch(
            lambda: pt.ho_tl_layernorm_wide[(rows,)](x, y, w, b, n, 1e-5, BLOCK=2048, num_warps=8)
        )
        if small:
            ref = torch.nn.functional.layer_norm(x.view(rows, n), (n,), w, b, eps=1e-5)
            assert torch.allclose(y.view(rows, n), ref, atol=1e-4, rtol=1e-4), "layernorm mismatch"
    elif kid == "row_sum_triton":
        rows, n = (4, 5000) if small else (32, 4 << 20)  # 512 MiB
        x, out = rand(rows * n), torch.empty(rows, device=dev)
        launch(lambda: pt.ho_tl_row_sum[(rows,)](x, out, n, BLOCK=1024, num_warps=4))
        if small:
            assert torch.allclose(out, x.view(rows, n).sum(1), rtol=1e-4), "row sum mismatch"
    elif kid == "histogram_triton":
        n = 5000 if small else 16 << 20
        x, hist = rand(n), torch.zeros(16, device=dev, dtype=torch.int32)
        launch(
            lambda: pt.ho_tl_histogram[(triton.cdiv(n, 1024),)](x, hist, n, NBINS=16, BLOCK=1024)
        )
        if small:
            ref = torch.bincount((x * 16).long().clamp(max=15), minlength=16) * LAUNCHES
            assert torch.equal(hist.long(), ref), "histogram mismatch"
    elif kid == "bias_add_tiny_triton":
        rows, n = 4, 256
        x, bias, y = rand(rows * n), rand(n), torch.empty(rows * n, device=dev)
        launch(lambda: pt.ho_tl_bias_add[(rows,)](x, bias, y, n, BLOCK=256, num_warps=2))
        if small:
            assert torch.equal(y.view(rows, n), x.view(rows, n) + bias), "bias add mismatch"
    elif kid == "control_silu_triton":
        n = 5000 if small else 256 << 20  # 1 GiB of fp32 in, 1 GiB out
        x, y = rand(n) * 8 - 4, torch.empty(n, device=dev)
        launch(lambda: pt.ho_tl_silu[(triton.cdiv(n, 2048),)](x, y, n, BLOCK=2048, num_warps=8))
        if small:
            assert torch.allclose(y, torch.nn.functional.silu(x), atol=1e-6, rtol=1e-5), (
                "silu mismatch"
            )
    elif kid == "fp16_nodot_triton":
        m = 64 if small else 4096
        a, b = rand(m * m, torch.float16).view(m, m), rand(m * m, torch.float16).view(m, m)
        c = torch.empty(m, m, device=dev, dtype=torch.float16)
        bm, bn, bk = (16, 16, 8) if small else (32, 32, 8)
        launch(
            lambda: pt.planted_tl_gemm_nodot[(m // bm, m // bn)](
                a, b, c, m, m, m, BM=bm, BN=bn, BK=bk, num_warps=4
            )
        )
        if small:
            assert torch.allclose(c.float(), a.float() @ b.float(), atol=5e-2, rtol=1e-2), (
                "gemm mismatch"
            )
    elif kid == "half_wave_triton":
        n = 5000 if small else 64 << 20
        x, y = rand(n), rand(n)
        y0 = y.clone()
        nprog = 4 if small else 2 * SMS
        launch(
            lambda: pt.ho_tl_half_wave[(nprog,)](
                x, y, n, 0.5, NPROG=nprog, BLOCK=256 if small else 1024, num_warps=8
            )
        )
        if small:
            assert torch.allclose(y, y0 + LAUNCHES * 0.5 * x, rtol=1e-5), "half wave mismatch"
    elif kid == "bf16_rank1_triton":
        m = 64 if small else 4096
        a = rand(m * m, torch.float16 if small else torch.bfloat16).view(m, m)
        b = rand(m * m, torch.float16 if small else torch.bfloat16).view(m, m)
        c = torch.empty(m, m, device=dev, dtype=a.dtype)
        bm, bn = (16, 16) if small else (64, 64)
        launch(
            lambda: pt.ho_tl_rank1_update[(m // bm, m // bn)](
                a, b, c, m, m, m, BM=bm, BN=bn, num_warps=4
            )
        )
        if small:
            assert torch.allclose(c.float(), a.float() @ b.float(), atol=5e-1, rtol=2e-2), (
                "gemm mismatch"
            )
    elif kid == "linear_nodot_triton":
        m, n, k = (64, 32, 48) if small else (4096, 2048, 1024)
        x = rand(m * k).view(m, k)
        w = rand(n * k).view(n, k)  # out_features x in_features, as torch.nn.Linear
        y = torch.empty(m, n, device=dev)
        bm, bn = (16, 16) if small else (128, 32)
        launch(
            lambda: pt.hom_tl_linear_nodot[(m // bm, n // bn)](
                x, w, y, m, n, k, BM=bm, BN=bn, num_warps=4
            )
        )
        if small:
            assert torch.allclose(y, x @ w.t(), atol=1e-4, rtol=1e-4), "linear mismatch"
    elif kid == "scores_nodot_triton":
        bh, seq, head = (2, 32, 64) if small else (16, 2048, 64)
        q = rand(bh * seq * head, torch.float16).view(bh, seq, head)
        kt = rand(bh * seq * head, torch.float16).view(bh, seq, head)
        s = torch.empty(bh, seq, seq, device=dev, dtype=torch.float16)
        bm, bn = (16, 16) if small else (64, 64)
        scale = head**-0.5
        launch(
            lambda: pt.hom_tl_scores_nodot[(seq // bm, seq // bn, bh)](
                q, kt, s, seq, scale, HEAD=head, BM=bm, BN=bn, num_warps=4
            )
        )
        if small:
            ref = (q.float() @ kt.float().transpose(1, 2)) * scale
            assert torch.allclose(s.float(), ref, atol=2e-2, rtol=1e-2), "scores mismatch"
    elif kid == "gemv_cols_triton":
        m, k = (256, 48) if small else (65536, 1024)  # 256 MiB of A
        a, x = rand(m * k).view(m, k), rand(k)
        y = torch.empty(m, device=dev)
        bm = 32 if small else 128
        launch(lambda: pt.hom_tl_gemv_cols[(m // bm,)](a, x, y, m, k, BM=bm, num_warps=4))
        if small:
            assert torch.allclose(y, a @ x, atol=1e-4, rtol=1e-4), "gemv mismatch"
    elif kid == "softmax_triton":
        rows, cols = (8, 100) if small else (16384, 4096)  # 256 MiB in, 256 MiB out
        x, y = rand(rows * cols).view(rows, cols) * 8 - 4, torch.empty(rows, cols, device=dev)
        block = triton.next_power_of_2(cols)
        launch(lambda: pt.hom_tl_softmax[(rows,)](y, x, cols, BLOCK=block, num_warps=8))
        if small:
            assert torch.allclose(y, torch.softmax(x, dim=1), atol=1e-6), "softmax mismatch"
    else:
        raise SystemExit(f"unknown id {kid}")
    if not small:
        torch.cuda.synchronize()
    print(f"{kid}: ok")


if __name__ == "__main__":
    main(sys.argv)
