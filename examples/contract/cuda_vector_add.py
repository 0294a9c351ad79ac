"""Kernel contract example (language="cuda"): a CUDA C++ vector add built with load_inline.

The CUDA source is this module's CUDA_SOURCE string (or the request's ``cuda_source``); the
functions listed in CUDA_FUNCTIONS (or ``cuda_functions``) are exposed to Python. Each entry
receives the compiled extension module first::

    ProfileRequest(source=<this file>, language="cuda", configs={"n": [1 << 20]},
                   variants=[Variant(name="torch", entry="reference"),
                             Variant(name="cuda", entry="run")], baseline="torch")

A second request with the same CUDA source and flags reuses the built library (cache hit).
"""

import torch

CUDA_SOURCE = r"""
#include <torch/extension.h>

__global__ void add_kernel(const float* x, const float* y, float* out, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] + y[i];
}

torch::Tensor vector_add(torch::Tensor x, torch::Tensor y) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat, "x must be a float32 CUDA tensor");
  auto out = torch::empty_like(x);
  int64_t n = x.numel();
  int threads = 256;
  add_kernel<<<(n + threads - 1) / threads, threads>>>(
      x.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(), n);
  return out;
}
"""
CUDA_FUNCTIONS = ["vector_add"]


def setup(n: int, device: str = "cuda"):
    return torch.randn(n, device=device), torch.randn(n, device=device)


def run(ext, x, y):
    return ext.vector_add(x, y)


def reference(ext, x, y):
    return x + y
