"""Kernel contract example (language="torch"): a hand-written softmax against torch.softmax.

Every kernel the manual version launches is inside its range; their times are summed
(``combine_kernels="sum"``) and listed by name in the result's ``kernels``::

    ProfileRequest(source=<this file>, language="torch",
                   configs=[{"rows": 1024, "cols": 1024}, {"rows": 4096, "cols": 512}],
                   variants=[Variant(name="torch", entry="run"),
                             Variant(name="manual", entry="manual_softmax")])
"""

import torch


def setup(rows: int, cols: int, dtype: str = "float32", device: str = "cuda"):
    return torch.randn(rows, cols, device=device, dtype=getattr(torch, dtype))


def run(x):
    return torch.softmax(x, dim=-1)


def manual_softmax(x):
    """Three kernels or more (max, exp, sum, divide): all of them are inside the range."""
    shifted = x - x.amax(dim=-1, keepdim=True)
    e = shifted.exp()
    return e / e.sum(dim=-1, keepdim=True)
