"""What a command reads from its arguments: ``--config``/``--grid`` as configs, ``--metrics``
as names, a FILE as kernel source text or a report, and the file each source came from."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nsight_agent.errors import InvalidRequestError
from nsight_agent.request import expand_configs


def _value(text: str) -> Any:
    """A config value: JSON when it parses (numbers, lists, true), else the plain string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_config(pairs: Sequence[str]) -> dict[str, Any]:
    """``["M=1024", "dtype=float16"]`` -> ``{"M": 1024, "dtype": "float16"}``."""
    out: dict[str, Any] = {}
    for pair in pairs:
        items: list[str] = []
        for part in pair.split(","):  # M=1,N=2 is two pairs; s=a,b and shape=[2,3] are one
            if items and "=" not in part:
                items[-1] += "," + part
            else:
                items.append(part)
        for item in items:
            key, sep, value = item.partition("=")
            if not sep or not key.strip() or key.strip().startswith("-"):
                raise InvalidRequestError(
                    f"--config expects key=value pairs; got {item!r}.",
                    "Example: --config M=1024 N=512 --config M=2048 N=512",
                )
            out[key.strip()] = _value(value.strip())
    return out


def parse_configs(
    configs: Sequence[Sequence[str]] | None, grid: str | None
) -> list[dict[str, Any]]:
    """The configs of ``--config`` (one per occurrence) and ``--grid`` (JSON: dict of lists or list)."""
    out = [parse_config(c) for c in configs or []]
    if grid:
        try:
            data = json.loads(grid)
        except json.JSONDecodeError as err:
            raise InvalidRequestError(
                f"--grid is not valid JSON: {err}",
                'Example: --grid \'{"M": [1024, 2048], "BLOCK": [64, 128]}\'',
            ) from err
        if isinstance(data, dict):  # expanded by the request's own rule, as on every path
            try:
                out += expand_configs(data)
            except ValueError as err:
                raise InvalidRequestError(
                    f"--grid: {err}", 'Example: --grid \'{"M": [1024, 2048], "BLOCK": [64, 128]}\''
                ) from err
        elif isinstance(data, list) and all(isinstance(d, dict) for d in data):
            out += data
        else:
            raise InvalidRequestError("--grid must be a JSON object of lists or a list of objects.")
        if not out:
            raise InvalidRequestError(
                "--grid gives no configuration.",
                "Give at least one: --grid '[{\"n\": 1024}]' or --config n=1024.",
            )
    return out or [{}]


def metrics_of(values: Sequence[str] | None) -> list[str]:
    return [m.strip() for v in values or [] for m in v.split(",") if m.strip()]


REPORT_MAGIC = b"NVR\0"


def is_report(path: Path) -> bool:
    """A .ncu-rep by name or by its first bytes (ncu writes ``NVR\\0`` first)."""
    if path.suffix == ".ncu-rep":
        return True
    try:
        with open(path, "rb") as f:
            return f.read(4) == REPORT_MAGIC
    except OSError:
        return False


def kernel_source(path: Path, command: str) -> str:
    """The text of a kernel source file (UTF-8), refused at once when there is none or it is
    not text. Whether it is Python and follows the contract, the validation stage judges
    (``service/validate.py``), naming this file (``source_files``)."""
    takes = f"{command} takes a kernel source file (Python, with setup() and the entry, or a "
    takes += "KernelBench problem)"
    takes += (
        ", a .ncu-rep, or a run id."
        if command == "diagnose"
        else "; `nsight-agent report` reads a .ncu-rep."
    )
    if path.is_dir():
        raise InvalidRequestError(f"{path} is a folder, not a file.", takes)
    if not path.is_file():
        raise InvalidRequestError(f"No file at {path}.", takes)
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise InvalidRequestError(
            f"{path} is neither an Nsight Compute report nor Python source (not UTF-8 text).",
            takes,
        ) from err


def source_files(main: str, candidates: dict[str, str] | None = None) -> dict[str, str]:
    """The file each source came from, as the validation stage names them in its messages:
    "" for the main FILE, a variant's name for its ``--candidate`` file."""
    return {"": main, **(candidates or {})}
