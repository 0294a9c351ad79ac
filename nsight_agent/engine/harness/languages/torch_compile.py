"""torch.compile: each entry wrapped in ``torch.compile``, compiled during its first call
(outside any measured range). Every config may compile once more, so the recompile limit is
raised to twice the config count: past dynamo's default limit it would fall back to eager
without a word."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from nsight_agent.engine.harness import runtime
from nsight_agent.engine.harness.languages.base import Adapter, Prepared
from nsight_agent.engine.harness.spec import VariantSpec


class TorchCompileAdapter(Adapter):
    title: ClassVar[str] = "torch.compile"

    def prepare(self) -> Prepared:
        import torch._dynamo

        limit = max(8, 2 * len(self.spec["configs"]))
        for knob in ("recompile_limit", "cache_size_limit"):
            if hasattr(torch._dynamo.config, knob):
                setattr(torch._dynamo.config, knob, limit)
        return Prepared()

    def entry(self, fn: Callable[..., Any], variant: VariantSpec) -> Callable[..., Any]:
        import torch

        with runtime.stage("compile", variant["name"]):
            compiled: Callable[..., Any] = torch.compile(fn, **self.spec["compile_options"])
        return compiled
