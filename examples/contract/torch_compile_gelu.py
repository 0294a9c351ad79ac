"""Kernel contract example (language="torch_compile"): tanh-approximated GELU.

With language="torch_compile" every entry is wrapped in ``torch.compile`` by the harness and
compiled during warm-up, so the measured range holds only the generated (fused) kernel(s)::

    ProfileRequest(source=<this file>, language="torch_compile", configs={"n": [1 << 16, 1 << 20]},
                   variants=[Variant(name="eager_ref", entry="reference"),
                             Variant(name="compiled", entry="run")], baseline="eager_ref")

(``reference`` is compiled too: compare against ``language="torch"`` runs for eager times.)
"""

import math

import torch


def setup(n: int, device: str = "cuda"):
    return (torch.randn(n, device=device),)


def run(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def reference(x):
    return torch.nn.functional.gelu(x, approximate="tanh")
