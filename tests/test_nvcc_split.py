"""nvcc's host and device passes at once (engine/harness/nvcc_split.py): the plan read from
nvcc's own ``-dryrun`` lines (recorded from nvcc 13.0, one file, one arch, with and without
the dependency file torch asks for), what it refuses to split, and, where nvcc is here, a real
compile through it against nvcc's own: the same exit, the same errors, the same dependencies."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nsight_agent.engine.harness import ext_builds, nvcc_split

FIXTURES = Path(__file__).parent / "fixtures"
SPLITTER = Path(nvcc_split.__file__)


def dryrun(name: str) -> list[str]:
    text = (FIXTURES / f"nvcc_dryrun_{name}.txt").read_text()
    return [line[3:] for line in text.splitlines() if line.startswith("#$ ")]


def test_the_plan_runs_cudafe_beside_cicc_with_the_module_id_written_first() -> None:
    passes = nvcc_split.plan(dryrun("plain"), ["-c", "k.cu"])
    assert passes is not None
    assert [s.split()[0] for s in passes.host] == ["gcc", "cudafe++"]
    assert " -E " in passes.host[0] and "-D__CUDA_ARCH__=" not in passes.host[0]
    assert "--gen_module_id_file" not in passes.host[1]  # it reads the id written beforehand
    tools = [s.split()[0].strip('"').rsplit("/", 1)[-1] for s in passes.device]
    assert tools[:4] == ["gcc", "cicc", "ptxas", "fatbinary"], tools
    assert " -c " in passes.last and ".cudafe1.cpp" in passes.last
    id_file, written = passes.module_id
    assert (
        id_file.endswith("k.module_id") and f'--module_id_file_name "{id_file}"' in (passes.host[1])
    )
    assert re.fullmatch(r"_[0-9a-f]{8}_4_k_cu_[0-9a-f]{8}", written)  # nvcc's shape
    assert passes.env["CICC_PATH"].endswith("nvvm/bin") and passes.depfile is None


def test_torchs_dependency_file_is_written_by_both_preprocessors() -> None:
    passes = nvcc_split.plan(dryrun("deps"), ["-c", "k.cu"])
    assert passes is not None and passes.depfile == "k.o.d"
    assert len(passes.depfile_parts) == 2
    flagged = [s for s in [*passes.host, *passes.device] if " -MD -MF " in s]
    assert len(flagged) == 2 and all(" -E " in s and "-MT k.o" in s for s in flagged)


def test_a_module_id_is_the_same_for_the_same_build_and_differs_between_files(
    tmp_path: Path,
) -> None:
    a, b = tmp_path / "a.cu", tmp_path / "b.cu"
    a.write_text("__global__ void f() {}\n")
    b.write_text("__global__ void g() {}\n")
    assert nvcc_split.module_id(str(a), ["-c"]) == nvcc_split.module_id(str(a), ["-c"])
    assert nvcc_split.module_id(str(a), ["-c"]) != nvcc_split.module_id(str(b), ["-c"])
    assert nvcc_split.module_id(str(a), ["-c"]) != nvcc_split.module_id(str(a), ["-c", "-O0"])


@pytest.mark.parametrize(
    "change",
    [
        lambda lines: [*lines[:-1], "nvlink --arch=sm_90 a.o -o dlink.o", lines[-1]],
        lambda lines: [line.replace("--gen_module_id_file ", "") for line in lines],
        lambda lines: [*lines, "-- Some Other Pass --"],
        lambda lines: [line.replace("-E -x", "-D__CUDACC_RDC__ -E -x") for line in lines],
        lambda lines: lines[:-1],
    ],
    ids=["device_link", "no_module_id", "internal_pass", "relocatable", "no_host_compile"],
)
def test_passes_of_another_shape_are_left_to_nvcc(change: object) -> None:
    assert callable(change)
    assert nvcc_split.plan(change(dryrun("plain")), ["-c", "k.cu"]) is None


def test_the_dependency_parts_merge_into_one_rule(tmp_path: Path) -> None:
    parts = [tmp_path / "p0", tmp_path / "p1"]
    parts[0].write_text("k.o: k.cu /inc/a.h \\\n /inc/with\\ space.h\n")
    parts[1].write_text("k.o: k.cu /inc/a.h \\\n /inc/device_only.h\n")
    nvcc_split.merge_depfiles(str(tmp_path / "k.o.d"), [str(p) for p in parts])
    text = (tmp_path / "k.o.d").read_text()
    assert text.startswith("k.o: k.cu")
    found = re.split(r"(?<!\\)\s+", text.replace("\\\n", " ").split(": ", 1)[1].strip())
    assert found == ["k.cu", "/inc/a.h", "/inc/with\\ space.h", "/inc/device_only.h"]
    assert not any(p.exists() for p in parts)


def test_a_build_names_the_splitter_as_torchs_nvcc_unless_the_user_named_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from torch.utils import cpp_extension

    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("#!/bin/sh\n")
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", str(tmp_path / "cuda"))
    monkeypatch.delenv("PYTORCH_NVCC", raising=False)
    monkeypatch.delenv(nvcc_split.ENV, raising=False)
    named = ext_builds.compiler_env()["PYTORCH_NVCC"]
    assert str(SPLITTER) in named and named.endswith(f"--nvcc {nvcc}")
    monkeypatch.setenv(nvcc_split.ENV, "0")
    assert "PYTORCH_NVCC" not in ext_builds.compiler_env()
    monkeypatch.delenv(nvcc_split.ENV)
    monkeypatch.setenv("PYTORCH_NVCC", "ccache nvcc")
    assert "PYTORCH_NVCC" not in ext_builds.compiler_env()  # the user's, left as it is


# --- a real compile, where nvcc is here --------------------------------------------------------

NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="needs nvcc (the CUDA toolkit)")

GOOD = """
#include <cuda_runtime.h>
__global__ void scale(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * 2.0f;
}
void launch(const float* x, float* y, int n) { scale<<<(n + 255) / 256, 256>>>(x, y, n); }
"""


def compile_both(tmp_path: Path, source: str) -> dict[str, subprocess.CompletedProcess[str]]:
    (tmp_path / "k.cu").write_text(source)
    flags = ["-gencode=arch=compute_90,code=sm_90", "-std=c++17", "-c", "k.cu"]
    done = {}
    for way, argv in (
        ("nvcc", [str(NVCC)]),
        ("split", [sys.executable, str(SPLITTER), "--nvcc", str(NVCC)]),
    ):
        deps = ["--generate-dependencies-with-compile", "--dependency-output", f"{way}.o.d"]
        done[way] = subprocess.run(
            [*argv, *deps, *flags, "-o", f"{way}.o"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env={**os.environ, "TMPDIR": str(tmp_path)},
        )
    return done


def rule_deps(path: Path) -> set[str]:
    text = path.read_text().replace("\\\n", " ")
    return {d for d in re.split(r"(?<!\\)\s+", text.split(":", 1)[1]) if d}


@needs_nvcc
def test_through_the_splitter_nvcc_makes_the_object_and_the_dependencies(tmp_path: Path) -> None:
    done = compile_both(tmp_path, GOOD)
    assert done["nvcc"].returncode == 0 == done["split"].returncode, done["split"].stderr
    assert (tmp_path / "split.o").stat().st_size > 0
    assert rule_deps(tmp_path / "split.o.d") == rule_deps(tmp_path / "nvcc.o.d")
    assert not list(tmp_path.glob("*.part*"))
    assert not list(tmp_path.glob("nvcc-split-*"))  # its intermediates folder is removed


@needs_nvcc
@pytest.mark.parametrize(
    "broken",
    [("int i = ", "int i = ;"), ("x[i] * 2.0f", "x[i] * undefined_dev")],
    ids=["syntax", "device_undefined"],
)
def test_through_the_splitter_a_broken_file_fails_with_nvccs_own_errors(
    tmp_path: Path, broken: tuple[str, str]
) -> None:
    source = GOOD.replace(broken[0], broken[1], 1)
    done = compile_both(tmp_path, source)
    assert done["nvcc"].returncode != 0
    assert done["split"].returncode == done["nvcc"].returncode
    assert done["split"].stderr == done["nvcc"].stderr
    assert not (tmp_path / "split.o").exists()
