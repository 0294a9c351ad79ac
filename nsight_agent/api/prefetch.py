"""Imports that run in a thread while a profile call waits on ncu: what the caller needs only
after it (the report's readers, the plot's matplotlib) is then loaded by the time ncu is done."""

from __future__ import annotations

import contextlib
import importlib
import threading


def start(*modules: str, name: str) -> threading.Thread:
    """Import ``modules`` in a new thread; join it before importing any of them yourself."""
    thread = threading.Thread(target=_import_all, args=modules, name=name)
    thread.start()
    return thread


def _import_all(*modules: str) -> None:
    with contextlib.suppress(Exception):  # the caller's own import says what went wrong
        for module in modules:
            importlib.import_module(module)
