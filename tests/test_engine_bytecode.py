"""The bytecode cache of the Python children (``engine/bytecode.py``): where an installed
package has no bytecode beside it, a child compiles it once into our folder and never writes
beside the user's sources; where it has, or the user chose a prefix, nothing changes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from nsight_agent.engine import bytecode, process


def _package(root: Path, name: str) -> Path:
    pkg = root / name
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("VALUE = 41 + 1\n")
    return pkg


def test_a_package_without_bytecode_beside_it_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    pkg = _package(tmp_path, "nsa_bare_pkg")
    assert bytecode.bytecode_missing("nsa_bare_pkg")
    bytecode.bytecode_missing.cache_clear()
    subprocess.run(
        [sys.executable, "-c", "import nsa_bare_pkg"], cwd=tmp_path, check=True,
        env={k: v for k, v in process.child_env().items()
             if k not in (bytecode.NO_WRITE_ENV, bytecode.PREFIX_ENV)},
    )  # fmt: skip
    assert list((pkg / "__pycache__").glob("__init__.*.pyc"))
    assert not bytecode.bytecode_missing("nsa_bare_pkg")
    assert not bytecode.bytecode_missing("nsa_no_such_package")


def test_the_cache_is_added_only_where_torch_has_no_bytecode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bytecode, "bytecode_missing", lambda package="torch": True)
    env = {bytecode.NO_WRITE_ENV: "1", "PATH": "/bin"}
    bytecode.add_cache(env, tmp_path / "pyc")
    assert env == {bytecode.PREFIX_ENV: str(tmp_path / "pyc"), "PATH": "/bin"}
    theirs = {bytecode.PREFIX_ENV: "/their/prefix", bytecode.NO_WRITE_ENV: "1"}
    bytecode.add_cache(theirs, tmp_path / "pyc")
    assert theirs == {bytecode.PREFIX_ENV: "/their/prefix", bytecode.NO_WRITE_ENV: "1"}
    monkeypatch.setattr(bytecode, "bytecode_missing", lambda package="torch": False)
    cached = {bytecode.NO_WRITE_ENV: "1"}
    bytecode.add_cache(cached, tmp_path / "pyc")
    assert cached == {bytecode.NO_WRITE_ENV: "1"}


def test_a_child_compiles_into_our_folder_once_and_writes_nothing_beside_the_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As on the H200's image: PYTHONDONTWRITEBYTECODE set, no bytecode beside the package.
    pkg = _package(tmp_path / "site", "nsa_uncached_pkg")
    monkeypatch.setattr(bytecode, "bytecode_missing", lambda package="torch": True)
    env = {**process.child_env(), bytecode.NO_WRITE_ENV: "1"}
    env.pop(bytecode.PREFIX_ENV, None)
    env["PYTHONPATH"] = str(tmp_path / "site")
    bytecode.add_cache(env, tmp_path / "pyc")
    code = "import nsa_uncached_pkg, sys; print(nsa_uncached_pkg.VALUE, sys.pycache_prefix)"
    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert first.stdout.split() == ["42", str(tmp_path / "pyc")], first.stderr
    written = list((tmp_path / "pyc").rglob("nsa_uncached_pkg/__init__.*.pyc"))
    assert len(written) == 1
    assert not (pkg / "__pycache__").exists()
    stamp = written[0].stat().st_mtime_ns
    again = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert again.stdout.split()[0] == "42"
    assert written[0].stat().st_mtime_ns == stamp  # read, not compiled again
