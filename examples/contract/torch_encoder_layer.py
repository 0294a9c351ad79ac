"""Kernel contract example (language="torch"): one training step of a bf16 transformer encoder
layer (forward and backward). Its kernels are cuBLAS GEMMs, cuDNN (or flash) attention and
ATen's elementwise, dropout and layer-norm kernels: diagnose_kernel answers with the step view
first (groups by torch operator, owners, Amdahl bounds)::

    diagnose_kernel(source=<this file>, language="torch", configs=[{"batch": 8, "seq": 512}])
"""

import torch


def setup(batch: int, seq: int, d_model: int = 1024, device: str = "cuda"):
    layer = torch.nn.TransformerEncoderLayer(
        d_model=d_model,
        nhead=16,
        dim_feedforward=4 * d_model,
        dropout=0.1,
        batch_first=True,
        device=device,
        dtype=torch.bfloat16,
    ).train()
    x = torch.randn(batch, seq, d_model, device=device, dtype=torch.bfloat16, requires_grad=True)
    return layer, x


def run(layer, x):
    out = layer(x)
    out.float().square().mean().backward()
    return out.detach()
