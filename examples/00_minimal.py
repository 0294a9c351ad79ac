"""00 - the smallest useful profile: one PyTorch matmul, one configuration.

Shows:
- ``@nsight_agent.analyze.kernel`` used bare, without arguments; the configurations are
  then given when the function is called: ``matmul(configs=[(1024,)])``.
- ``nsight_agent.annotate("torch")`` marks the code whose kernels are measured. The input
  tensors are made before the range opens, so only the matmul kernel is profiled.
- The default metric, ``gpu__time_duration.sum`` (kernel duration in nanoseconds).

Calling ``matmul`` starts one child process under Nsight Compute (``ncu``) and sends the
function there by value (with what it uses), so it could as well be defined inside another
function or in a notebook cell; this file is not re-run there. The ``__main__`` guard is
good style for a script, not a requirement.

Run (needs an NVIDIA GPU, PyTorch with CUDA and ``ncu`` on the PATH)::

    python examples/00_minimal.py
"""

import torch

import nsight_agent


@nsight_agent.analyze.kernel
def matmul(n: int) -> None:
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")
    with nsight_agent.annotate("torch"):
        _ = a @ b


def main() -> None:
    results = matmul(configs=[(1024,)])
    df = results.to_dataframe()
    print(df.to_string(index=False))

    time_ns = float(df["AvgValue"].iloc[0])
    print(f"\n1024 x 1024 fp32 matmul: {time_ns / 1e3:.1f} us per kernel ({df['Kernel'].iloc[0]})")
    if len(df) != 1 or not time_ns > 0:
        raise RuntimeError(f"expected one row with a positive time, got:\n{df}")


if __name__ == "__main__":
    main()
