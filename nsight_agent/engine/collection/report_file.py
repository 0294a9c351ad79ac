"""Is this file an Nsight Compute report, and is it whole? Checked before the reader opens
it: ``ncu_report`` reads a foreign, empty or truncated file as a report with 0 kernels.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nsight_agent.errors import NotAReportError, TruncatedReportError

REPORT_MAGIC = b"NVR\0"
"""The first bytes of every .ncu-rep (ncu 2023-2025 seen): then a u32 file-header length."""


def check_report_file(p: Path) -> None:
    """Refuse a file that is not an Nsight Compute report or ends early, before the reader
    sees it (it reads such files as an empty report with 0 kernels).

    The layout, as recorded from ncu 2025.3 reports: ``NVR\\0``, u32 n, a file header of n
    bytes, then blocks of [u32 n, block header of n bytes (protobuf; field 5 = payload
    size), payload]. A complete report ends exactly at the end of its last block.
    """
    size = p.stat().st_size
    hint = "Give the path of a .ncu-rep written by `ncu -o` (or --export)."
    if size == 0:
        raise TruncatedReportError(
            f"{p} is empty (0 bytes): truncated Nsight Compute report?", hint
        )
    with open(p, "rb") as f:
        head = f.read(8)
        if not head.startswith(REPORT_MAGIC[: len(head)]) or len(head) < len(REPORT_MAGIC):
            raise NotAReportError(
                f"{p} is not an Nsight Compute report (it does not start with the .ncu-rep "
                f"header NVR\\0; its first bytes are {head[:8]!r}).",
                hint,
            )
        end = _blocks_end(f, size)
    if end is not None and end != size:
        raise TruncatedReportError(
            f"{p} is a truncated (or corrupt) Nsight Compute report: its blocks need {end} bytes, the file "
            f"has {size}.",
            "The run that wrote it was interrupted (killed, out of disk?): profile again, or "
            "copy the whole file.",
        )


def _blocks_end(f: Any, size: int) -> int | None:
    """Where the last block of the report ends; None when the layout is not the one known
    (another ncu version): then the reader alone decides."""
    f.seek(4)
    raw = f.read(4)
    if len(raw) < 4:
        return 8
    pos = 8 + int.from_bytes(raw, "little")
    while pos < size:
        f.seek(pos)
        raw_len = f.read(4)
        if len(raw_len) < 4:
            return pos + 4
        header_len = int.from_bytes(raw_len, "little")
        if pos + 4 + header_len > size:
            return pos + 4 + header_len
        payload = _payload_size(f.read(header_len))
        if payload is None:
            return None
        pos += 4 + header_len + payload
    return pos


def _payload_size(header: bytes) -> int | None:
    """Field 5 (a varint) of a protobuf block header; 0 when absent, None when unreadable."""
    i = 0

    def varint() -> int:
        nonlocal i
        shift = value = 0
        while True:
            byte = header[i]
            i += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    try:
        while i < len(header):
            tag = varint()
            wire = tag & 7
            if wire == 0:
                value = varint()
                if tag >> 3 == 5:
                    return value
            elif wire == 2:
                length = varint()  # not `i += varint()`: that adds to i as it was before
                i += length
            elif wire in (1, 5):
                i += 8 if wire == 1 else 4
            else:
                return None
    except IndexError:
        return None
    return 0
