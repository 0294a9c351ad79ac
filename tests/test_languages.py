"""One adapter per language (engine/harness/languages/), loaded by the one loader both methods
call (harness/sources.py), on the CPU: each language's setup and entries as its adapter makes
them, and a language registered for a test that the harness program and the warm timing
worker both measure through."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch

from nsight_agent.engine.harness import cuda_build, program, render, sources
from nsight_agent.engine.harness.errors import SourceError
from nsight_agent.engine.harness.languages import ADAPTERS, adapter_for, cuda, kernelbench
from nsight_agent.engine.harness.languages.base import Adapter, Sources
from nsight_agent.engine.harness.languages.torch import TorchAdapter
from nsight_agent.engine.harness.spec import Spec, VariantSpec, read_spec
from nsight_agent.engine.process import child_env
from nsight_agent.engine.worker import timing_run
from nsight_agent.engine.worker.timing_options import TimingOptions
from nsight_agent.request import ProfileRequest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "contract"
KB = ROOT / "tests" / "fixtures" / "kernelbench"
FAST = TimingOptions(min_runs=3, max_runs=3, warmup_min=1, warmup_max=2)


def rendered(tmp_path: Path, **fields: Any) -> tuple[Path, Spec]:
    """A run folder of the request ``fields`` (sources and harness.py) and its SPEC."""
    req = ProfileRequest.model_validate({"runs": 2, "warmup": 1, **fields})
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    render.write_run_files(req, run_dir, tmp_path / "cache")
    return run_dir, read_spec(run_dir / "harness.py")


@pytest.fixture
def loaded_sources() -> Iterator[list[Spec]]:
    """Specs whose modules a test loaded into this process; dropped from it afterwards."""
    specs: list[Spec] = []
    yield specs
    for spec in specs:
        for name in sources.module_names(spec):
            sys.modules.pop(name, None)


def test_every_language_of_a_request_has_its_adapter() -> None:
    assert sorted(ADAPTERS) == ["cuda", "kernelbench", "torch", "torch_compile", "triton"]
    assert all(issubclass(a, Adapter) for a in ADAPTERS.values())
    with pytest.raises(ValueError, match="no adapter for language 'fortran'; languages: triton"):
        adapter_for("fortran")


def softmax_pair(tmp_path: Path) -> tuple[Path, Spec]:
    """The contract example's softmax, rendered with its two entries as two variants."""
    variants = [{"name": "ref", "entry": "run"}, {"name": "mine", "entry": "manual_softmax"}]
    return rendered(
        tmp_path,
        source=(EXAMPLES / "torch_softmax.py").read_text(),
        language="torch",
        configs=[{"rows": 4, "cols": 8}],
        variants=variants,
    )


def test_torch_entries_are_the_sources_own_functions(
    tmp_path: Path, loaded_sources: list[Spec]
) -> None:
    run_dir, spec = softmax_pair(tmp_path)
    loaded_sources.append(spec)
    loaded = sources.load(spec, run_dir, "cpu")
    module = sys.modules["user_source"]
    assert type(loaded.adapter) is TorchAdapter
    assert loaded.setup is module.setup
    assert loaded.entries == {"ref": module.run, "mine": module.manual_softmax}
    assert loaded.prepared.run_entries and not loaded.prepared.notes and not loaded.dropped


def test_a_variant_whose_own_source_fails_costs_that_variant_only(
    tmp_path: Path, loaded_sources: list[Spec]
) -> None:
    source = (EXAMPLES / "torch_softmax.py").read_text()
    broken = "def go(x):\n    return x +\n"
    variants = [
        {"name": "ref", "entry": "run"},
        {"name": "a", "entry": "go", "source": broken},
        {"name": "b", "entry": "missing"},
    ]
    run_dir, spec = rendered(
        tmp_path,
        source=source,
        language="torch",
        configs=[{"rows": 4, "cols": 8}],
        variants=variants,
    )
    loaded_sources.append(spec)
    loaded = sources.load(spec, run_dir, "cpu")
    assert list(loaded.entries) == ["ref"]
    assert (loaded.dropped["a"]["stage"], loaded.dropped["a"]["line"]) == ("import", 2)
    assert "no function 'missing'" in loaded.dropped["b"]["message"]
    broken_main = dict(spec, setup_module="variant_1")
    with pytest.raises(SourceError, match="SyntaxError"):
        sources.load(broken_main, run_dir, "cpu")  # type: ignore[arg-type]


def test_torch_compile_wraps_every_entry_and_raises_the_recompile_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loaded_sources: list[Spec]
) -> None:
    source = (EXAMPLES / "torch_compile_gelu.py").read_text()
    configs = [{"n": n} for n in (16, 32, 64, 128, 256)]
    variants = [{"name": "ref", "entry": "reference"}, {"name": "mine", "entry": "run"}]
    run_dir, spec = rendered(
        tmp_path, source=source, language="torch_compile", configs=configs, variants=variants
    )
    spec["compile_options"] = {"backend": "eager"}  # dynamo's graph capture, no codegen
    for knob in ("recompile_limit", "cache_size_limit"):  # put back after the test
        monkeypatch.setattr(torch._dynamo.config, knob, getattr(torch._dynamo.config, knob))
    loaded_sources.append(spec)
    loaded = sources.load(spec, run_dir, "cpu")
    module = sys.modules["user_source"]
    assert loaded.entries["mine"] is not module.run
    assert getattr(loaded.entries["mine"], "_torchdynamo_orig_callable", None) is module.run
    assert torch._dynamo.config.recompile_limit == 10  # twice the configs, at least 8
    (x,) = loaded.setup(n=64, device="cpu")
    torch.testing.assert_close(loaded.entries["mine"](x), module.reference(x))


def test_kernelbench_builds_inputs_and_models_with_the_shared_seed(
    tmp_path: Path, loaded_sources: list[Spec]
) -> None:
    problem = (KB / "problem_linear_relu.py").read_text()
    candidate = (KB / "new_honest.py").read_text()
    run_dir, spec = rendered(
        tmp_path, source=problem, variants=[{"name": "ref"}, {"name": "new", "source": candidate}]
    )
    loaded_sources.append(spec)
    loaded = sources.load(spec, run_dir, "cpu")
    assert type(loaded.adapter) is kernelbench.KernelBenchAdapter
    (x,) = loaded.setup(device="cpu", batch_size=4)
    assert x.shape == (4, 64) and sys.modules["variant_1"].batch_size == 4
    ref, new = loaded.entries["ref"](x), loaded.entries["new"](x)
    assert ref.shape == (4, 64) and not ref.requires_grad
    torch.testing.assert_close(new, ref)  # equal weights: both built after the same seed


def test_triton_runs_in_its_interpreter_on_a_cpu(tmp_path: Path) -> None:
    """The adapter's environment comes before the source imports triton: a new process that
    did not set TRITON_INTERPRET runs the kernel on CPU tensors."""
    source = (EXAMPLES / "triton_vector_add.py").read_text()
    variants = [{"name": "torch", "entry": "reference"}, {"name": "triton", "entry": "run"}]
    run_dir, _ = rendered(
        tmp_path, source=source, language="triton", configs={"n": [3000]}, variants=variants
    )
    script = textwrap.dedent(
        """
        import json, os, sys
        from pathlib import Path
        import torch
        from nsight_agent.engine.harness import sources
        from nsight_agent.engine.harness.spec import read_spec

        run_dir = Path(sys.argv[1])
        loaded = sources.load(read_spec(run_dir / "harness.py"), run_dir, "cpu")
        inputs = loaded.setup(n=3000, device="cpu")
        same = torch.equal(loaded.entries["triton"](*inputs), loaded.entries["torch"](*inputs))
        print(json.dumps([os.environ.get("TRITON_INTERPRET"), "triton" in sys.modules, same]))
        """
    )
    env = {k: v for k, v in child_env({}).items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, "-c", script, str(run_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == ["1", True, True]


CUDA_SOURCE = "__global__ void k() {}\ntorch::Tensor twice(torch::Tensor x) { return x * 2; }\n"


def cuda_spec(tmp_path: Path) -> Spec:
    source = (EXAMPLES / "cuda_vector_add.py").read_text()
    _, spec = rendered(tmp_path, source=source, language="cuda", configs={"n": [8]})
    spec["cuda"]["source"], spec["cuda"]["functions"] = CUDA_SOURCE, ["twice"]
    return spec


def test_cuda_without_a_gpu_is_compiled_only_and_its_entries_do_not_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked: list[tuple[str, list[str]]] = []

    def check_compile(source: str, functions: list[str], cache: Path) -> cuda_build.BuildInfo:
        checked.append((source, functions))
        return cuda_build.BuildInfo("key", str(cache), "nvcc-check", 1.5, False, functions)

    monkeypatch.setattr(cuda_build, "check_compile", check_compile)
    spec = cuda_spec(tmp_path)
    adapter = cuda.CudaAdapter(Sources(spec, {"user_source": sys.modules[__name__]}, "cpu"))
    prepared = adapter.prepare()
    assert checked == [(CUDA_SOURCE, ["twice"])]
    assert not prepared.run_entries and prepared.notes == [cuda.NOT_RUN]
    assert prepared.cuda_build is not None and prepared.cuda_build["mode"] == "nvcc-check"

    def rejects(source: str, functions: list[str], cache: Path) -> cuda_build.BuildInfo:
        raise cuda_build.CompileError("line 2: error: bad", 2, "the compiler's log")

    monkeypatch.setattr(cuda_build, "check_compile", rejects)
    with pytest.raises(SourceError) as raised:
        adapter.prepare()
    assert (raised.value.stage, raised.value.line, raised.value.file) == (
        "compile",
        2,
        "cuda_source",
    )


def test_a_built_extension_is_loaded_once_per_process_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The warm worker's pre-flight builds it, its timing job takes it: 0 s, a cache hit."""
    made: list[str] = []

    def build(source: str, functions: list[str], cache: Path) -> tuple[Any, cuda_build.BuildInfo]:
        made.append(source)
        ext = type(sys)("ext")
        return ext, cuda_build.BuildInfo("key", str(cache), "load_inline", 40.0, False, functions)

    monkeypatch.setattr(cuda_build, "build", build)
    monkeypatch.setattr(cuda, "_LOADED", {})
    spec = cuda_spec(tmp_path)

    def entry_of(device: str) -> tuple[Callable[..., Any], dict[str, Any] | None]:
        adapter = cuda.CudaAdapter(Sources(spec, {"user_source": sys.modules[__name__]}, device))
        prepared = adapter.prepare()
        return adapter.entry(lambda ext, x: (ext, x), spec["variants"][0]), prepared.cuda_build

    first, first_build = entry_of("cuda")
    second, second_build = entry_of("cuda")
    assert made == [CUDA_SOURCE] and first(1)[0] is second(1)[0]
    assert first_build is not None and second_build is not None
    assert (first_build["seconds"], first_build["cache_hit"]) == (40.0, False)
    assert (second_build["seconds"], second_build["cache_hit"]) == (0.0, True)


# --- one adapter, both methods -----------------------------------------------------------------


class Recording(TorchAdapter):
    """A language for this test: every entry it makes counts its calls, by method."""

    made: ClassVar[list[str]] = []
    calls: ClassVar[dict[str, int]] = {}

    def entry(self, fn: Callable[..., Any], variant: VariantSpec) -> Callable[..., Any]:
        name = variant["name"]
        Recording.made.append(name)

        def counted(*args: Any) -> Any:
            Recording.calls[name] = Recording.calls.get(name, 0) + 1
            return fn(*args)

        return counted


def test_the_harness_and_the_timing_worker_take_their_entries_from_the_same_adapter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loaded_sources: list[Spec]
) -> None:
    run_dir, spec = softmax_pair(tmp_path)
    spec["language"] = "recording"
    (run_dir / "harness.py").write_text(render.render(spec))
    loaded_sources.append(spec)
    monkeypatch.setitem(ADAPTERS, "recording", Recording)
    monkeypatch.chdir(run_dir)
    seen = {}
    for method in ("harness", "timing"):
        Recording.made.clear()
        Recording.calls.clear()
        if method == "harness":  # the rendered program, as a warm worker runs its pre-flight
            argv = ["--preflight", "--device", "cpu"]
            assert program.main(read_spec(run_dir / "harness.py"), argv) == 0
            manifest = json.loads((run_dir / "manifest.json").read_text())
            assert manifest["language"] == "recording"
            assert [c["ok"] for c in manifest["checks"]] == [True, True]
        else:
            result = timing_run.time_run_dir(run_dir, "cpu", FAST)
            assert [c["ok"] for c in result.checks] == [True, True]
        for name in sources.module_names(spec):
            sys.modules.pop(name, None)
        seen[method] = (list(Recording.made), dict(Recording.calls))
    assert seen["harness"][0] == seen["timing"][0] == ["ref", "mine"]
    assert all(n > 1 for made in seen.values() for n in made[1].values()), seen


def test_the_child_side_imports_no_front_end_weight() -> None:
    """The harness program, its loader and adapters load without pandas, pydantic or jinja2
    (a pre-flight's or a pre-launched target's start), and without triton until a source
    imports it (its interpreter is switched on before that)."""
    script = (
        "import sys\nimport nsight_agent.engine.harness.program\n"
        "print(sorted(m for m in ('pandas', 'pydantic', 'jinja2', 'triton') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=child_env({}),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout.strip() == "[]"


@pytest.mark.gpu
def test_a_cuda_extension_is_built_once_per_warm_worker_for_both_its_jobs(tmp_path: Path) -> None:
    """The warm worker's pre-flight builds (or loads) the extension; its timing job and the
    next request's pre-flight take the loaded one through the same adapter."""
    from nsight_agent.engine import pipeline
    from nsight_agent.engine.worker.pool import WorkerPool

    source = (EXAMPLES / "cuda_vector_add.py").read_text()
    variants = [{"name": "torch", "entry": "reference"}, {"name": "cuda", "entry": "run"}]
    req = ProfileRequest.model_validate(
        {"source": source, "language": "cuda", "configs": {"n": [1 << 20]}, "variants": variants}
    )
    with WorkerPool() as pool:
        first = pipeline.time_request(req, pool, runs_root=tmp_path, device="cuda")
        second = pipeline.time_request(req, pool, runs_root=tmp_path, device="cuda")
    for run in (first, second):
        assert run.processed["OutputOK"].all() and all(c.ok for c in run.checks)
    assert first.preflight is not None and second.preflight is not None
    assert first.preflight.cuda_build is not None and second.preflight.cuda_build is not None
    assert first.preflight.cuda_build["mode"] == "load_inline"
    assert (second.preflight.cuda_build["seconds"], second.preflight.cuda_build["cache_hit"]) == (
        0.0,
        True,
    )
