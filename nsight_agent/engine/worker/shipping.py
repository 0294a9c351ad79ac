"""The one way to move a user's callable (and its arguments and configs) into a worker process.

By value first: cloudpickle writes the function's code, its closure and the globals it uses
into the payload, so a nested function, a closure over tensors or numbers, a lambda, a bound
method, a function from ``exec``'d source, a ``python -c`` one-liner or a Jupyter cell runs in
the worker without the worker importing (or re-running) the user's script. Modules that a fresh
process could not import (``__main__``, a cell, an ``exec`` namespace, a file loaded under an
invented name) travel by value too; importable ones (torch, the user's packages) by reference.

By name only where by value fails (an unpicklable object in the closure: the payload names it):
the worker imports the function's module (a ``__main__`` script from its file, as a module, so
code under ``if __name__ == "__main__":`` does not run) and looks the function up by qualname.

``ship(fn, args=..., kwargs=..., configs=...) -> bytes`` in the caller, ``unship(bytes) ->
Shipped`` in the worker. The payload is a plain-pickled header (format version, ``sys.path``,
origin, source text of cells) around the cloudpickled body, so the worker sets up its import
path before anything of the user's is loaded.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import importlib.util
import inspect
import io
import linecache
import os
import pickle
import sys
import types
import warnings
from collections import ChainMap
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from types import ModuleType, TracebackType
from typing import Any, Literal

import cloudpickle  # type: ignore[import-untyped]

from nsight_agent.errors import InvalidRequestError

FORMAT = 1
WORKER_ENV = "NSIGHT_AGENT_CHILD"
How = Literal["value", "name"]


class ShippingError(InvalidRequestError):
    """The function, its arguments or its configs cannot be moved into the worker process."""


class ShippingWarning(UserWarning):
    """By value failed and the function travels by name (the worker imports its module)."""


class ImportStop(BaseException):
    """Raised by a profiled function called while the worker imports its module by name.

    A BaseException so that a user's ``except Exception`` does not swallow it.
    """


def in_worker() -> bool:
    """True inside a worker process started for a shipped function."""
    return os.environ.get(WORKER_ENV) == "1"


@dataclass
class Shipped:
    """What ``unship`` gives back in the worker."""

    func: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    configs: list[tuple[Any, ...]] | None = None
    how: How = "value"
    origin: str = ""


# --- the caller's side -----------------------------------------------------------------------


def ship(
    fn: Callable[..., Any],
    *,
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    configs: Sequence[tuple[Any, ...]] | None = None,
    by: Literal["auto", "value", "name"] = "auto",
) -> bytes:
    """Serialize ``fn`` (by value when possible) with its arguments into one payload."""
    origin, modules = describe(fn), _modules_of(fn)
    data = _data(origin, modules, args, kwargs, configs)
    why = ""
    if by != "name":
        try:
            return _pack("value", origin, dumps((fn, *data), modules), _sources(fn))
        except Exception as err:
            why = _culprits(_captured(fn), "object") or f"{type(err).__name__}: {err}"
            if by == "value":
                raise ShippingError(f"{origin} cannot be sent by value: {why}") from err
    name = by_name(fn)
    if name is None:
        raise ShippingError(
            f"{origin} cannot be sent to the worker process: {why}.",
            "Create that object inside the function instead of capturing it, or define the "
            "function at module level in an importable .py file (it is then imported by name).",
        )
    if why:
        warnings.warn(
            f"{origin} is sent by name (the worker imports {name['module']}) because it cannot "
            f"be sent by value: {why}.",
            ShippingWarning,
            stacklevel=2,
        )
    return _pack("name", origin, dumps((None, *data), modules), name=name)


def ship_by_name(
    module: str,
    qualname: str,
    *,
    file: str | None = None,
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    configs: Sequence[tuple[Any, ...]] | None = None,
) -> bytes:
    """A payload naming ``module.qualname`` (``module="__main__"`` with ``file``: a script
    imported from its file); the worker imports it, as a CLI or a remote caller would ask."""
    origin = f"{module}.{qualname}"
    data = _data(origin, [], args, kwargs, configs)
    name = {"module": module, "file": file, "qualname": qualname}
    return _pack("name", origin, dumps((None, *data)), name=name)


def _data(
    origin: str,
    modules: list[str],
    args: Sequence[Any],
    kwargs: dict[str, Any] | None,
    configs: Sequence[tuple[Any, ...]] | None,
) -> tuple[Any, ...]:
    data = (tuple(args), dict(kwargs or {}), None if configs is None else list(configs))
    try:
        dumps(data, modules)
    except Exception as err:
        raise ShippingError(
            f"The arguments or configs of {origin} cannot be sent to the worker process: "
            f"{_culprits(dict(enumerate(_flatten(data))), 'value') or err}",
            "Use plain values (numbers, strings, tuples, tensors, dtypes) in configs and "
            "arguments; build anything else (streams, handles, open files) inside the function.",
        ) from err
    return data


def _pack(
    how: How,
    origin: str,
    body: bytes,
    sources: dict[str, str] | None = None,
    name: dict[str, Any] | None = None,
) -> bytes:
    header = {
        "format": FORMAT,
        "how": how,
        "sys_path": _path(),
        "origin": origin,
        "sources": sources or {},
        "name": name,
        "body": body,
    }
    return pickle.dumps(header, protocol=pickle.HIGHEST_PROTOCOL)


def dumps(obj: Any, extra_modules: Sequence[str] = ()) -> bytes:
    """cloudpickle ``obj``; modules in ``extra_modules`` a fresh process cannot import go by value."""
    registered: list[ModuleType] = []
    for name in extra_modules:
        module = sys.modules.get(name)
        if module is not None and name != "__main__" and not importable(name):
            cloudpickle.register_pickle_by_value(module)
            registered.append(module)
    try:
        buffer = io.BytesIO()
        _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
        return buffer.getvalue()
    finally:
        for module in registered:
            cloudpickle.unregister_pickle_by_value(module)


def _code_keeping_its_file(code: types.CodeType) -> Any:
    # cloudpickle (>= 3.1) renames the file of code sent by value "<dynamic-code>"; keep the
    # user's file (or cell) so that tracebacks in the worker point at their own lines.
    reduced = _CLOUDPICKLE_CODE_REDUCE(code)
    ctor, args = reduced[0], reduced[1]
    return (ctor, tuple(code.co_filename if a == "<dynamic-code>" else a for a in args))


_CLOUDPICKLE_CODE_REDUCE = cloudpickle.Pickler.dispatch_table.get(types.CodeType)


class _Pickler(cloudpickle.Pickler):  # type: ignore[misc]
    if _CLOUDPICKLE_CODE_REDUCE is not None:
        dispatch_table = ChainMap(
            {types.CodeType: _code_keeping_its_file}, cloudpickle.Pickler.dispatch_table
        )


def importable(module_name: str) -> bool:
    """Whether a fresh interpreter with our sys.path would import the same ``module_name``."""
    module = sys.modules.get(module_name)
    if module is None:
        try:
            return importlib.util.find_spec(module_name) is not None
        except (ImportError, ValueError):
            return False
    spec = getattr(module, "__spec__", None)
    if spec is None or spec.name != module_name:
        return False  # made by exec or types.ModuleType, or loaded under another name
    if "." in module_name:
        return importable(module_name.rpartition(".")[0])
    if not spec.has_location:
        return True  # built-in or frozen
    found = importlib.machinery.PathFinder.find_spec(module_name, _path())
    return found is not None and found.origin == spec.origin


def _path() -> list[str]:
    # "" (python -c, the REPL) is the working directory, which the worker may not share.
    return list(dict.fromkeys(p or os.getcwd() for p in sys.path))


def describe(fn: Callable[..., Any]) -> str:
    """``name (file:line)`` of a callable, for messages."""
    target = _function(fn)
    code = getattr(target, "__code__", None)
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    if code is None:
        return str(name)
    return f"{name} ({code.co_filename}:{code.co_firstlineno})"


def by_name(fn: Callable[..., Any]) -> dict[str, Any] | None:
    """Module, file and qualname to import ``fn`` by, or None where no import can reach it."""
    target = _function(fn)
    module_name = getattr(target, "__module__", None)
    qualname = getattr(target, "__qualname__", "")
    if not module_name or "<" in qualname or (fn is not target and inspect.ismethod(fn)):
        return None
    module = sys.modules.get(module_name)
    file = getattr(module, "__file__", None)
    if module_name == "__main__":
        spec = getattr(module, "__spec__", None)
        if spec is not None:  # run as `python -m package.module`
            module_name = spec.name
        elif not file:
            return None  # an interactive session or a notebook cell
    elif not importable(module_name):
        return None
    return {"module": module_name, "file": file, "qualname": qualname}


def _function(fn: Callable[..., Any]) -> Any:
    fn = inspect.unwrap(fn) if callable(fn) else fn
    return getattr(fn, "__func__", fn)


def _modules_of(fn: Callable[..., Any]) -> list[str]:
    found = [getattr(_function(fn), "__module__", None)]
    self = getattr(fn, "__self__", None)
    if self is not None:
        found.append(type(self).__module__)
    return [m for m in found if isinstance(m, str)]


def _sources(fn: Callable[..., Any]) -> dict[str, str]:
    """Source text of files that exist only in this process's linecache (cells, exec'd code)."""
    code = getattr(_function(fn), "__code__", None)
    if code is None or os.path.isfile(code.co_filename):
        return {}
    lines = linecache.getlines(code.co_filename)
    return {code.co_filename: "".join(lines)} if lines else {}


def _captured(fn: Callable[..., Any]) -> dict[str, Any]:
    """What ``fn`` carries along: its closure cells, the globals it names, its ``self``."""
    target = _function(fn)
    out: dict[str, Any] = {}
    code = getattr(target, "__code__", None)
    if code is not None:
        for var, cell in zip(code.co_freevars, getattr(target, "__closure__", None) or ()):
            with contextlib.suppress(ValueError):  # an empty cell
                out[f"closure variable {var!r}"] = cell.cell_contents
        module_globals = getattr(target, "__globals__", {})
        for var in _names(code):
            if var in module_globals:
                out[f"global {var!r}"] = module_globals[var]
    if getattr(fn, "__self__", None) is not None:
        out["the bound object (self)"] = fn.__self__  # type: ignore[attr-defined]
    return out


def _names(code: Any) -> Iterator[str]:
    yield from code.co_names
    for const in code.co_consts:
        if inspect.iscode(const):
            yield from _names(const)


def _flatten(data: tuple[Any, ...]) -> list[Any]:
    args, kwargs, configs = data
    return [*args, *kwargs.values(), *(v for c in configs or () for v in c)]


def _culprits(objects: dict[Any, Any], kind: str) -> str:
    """The entries of ``objects`` that cloudpickle refuses, named with their types."""
    bad = []
    for name, obj in objects.items():
        try:
            cloudpickle.dumps(obj)
        except Exception as err:
            label = name if isinstance(name, str) else f"{kind} #{name}"
            bad.append(f"{label} of type {type(obj).__name__} ({type(err).__name__}: {err})")
    return "; ".join(bad)


# --- the worker's side -----------------------------------------------------------------------


def unship(payload: bytes, *, extend_path: bool = True) -> Shipped:
    """Rebuild what ``ship`` sent; import errors become ``ShippingError`` naming the module."""
    header = pickle.loads(payload)
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ShippingError("Not a payload written by nsight_agent.engine.worker.shipping.ship.")
    if extend_path:
        sys.path[:0] = [p for p in header["sys_path"] if p not in sys.path]
    for filename, text in header["sources"].items():
        linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    origin = header["origin"]
    try:
        func, args, kwargs, configs = pickle.loads(header["body"])
        if header["how"] == "name":
            func = resolve(load_module(header["name"]), header["name"]["qualname"])
    except ImportStop as stop:
        raise ShippingError(
            f"Loading {origin} in the worker imported {_importing(stop.__traceback__)}, which "
            "calls a profiled function when it is imported.",
            'Put that call under `if __name__ == "__main__":`.',
        ) from None
    except ImportError as err:
        raise ShippingError(
            f"The worker cannot import {err.name or 'a module'} needed by {origin}: {err}",
            "Install it in the interpreter the worker runs (the same as yours), or make the "
            "module importable from the working directory (PYTHONPATH).",
        ) from err
    return Shipped(func, args, kwargs, configs, header["how"], origin)


def _importing(tb: TracebackType | None) -> str:
    last = "a module"
    while tb is not None:
        if tb.tb_frame.f_code.co_name == "<module>":
            last = f"{tb.tb_frame.f_code.co_filename} (line {tb.tb_lineno})"
        tb = tb.tb_next
    return last


def load_module(name: dict[str, Any]) -> ModuleType:
    """Import a module by name; a ``__main__`` script from its file under another name."""
    if name["module"] != "__main__":
        try:
            return importlib.import_module(name["module"])
        except ImportStop:
            return sys.modules[name["module"]]
    alias = "__nsight_agent_target__"
    spec = importlib.util.spec_from_file_location(alias, name["file"])
    if spec is None or spec.loader is None:
        raise ShippingError(f"Cannot import {name['file']}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[alias] = module
    with contextlib.suppress(ImportStop):
        spec.loader.exec_module(module)
    return module


def resolve(module: ModuleType, qualname: str) -> Any:
    """``module.<qualname>``, unwrapped down to the user's own function."""
    obj: Any = module
    for part in qualname.split("."):
        if not hasattr(obj, part):
            raise ShippingError(
                f"{qualname} is not defined in {module.__name__} when it is imported.",
                "Keep the profiled function at module level and put the code that calls it "
                'under `if __name__ == "__main__":`.',
            )
        obj = getattr(obj, part)
    return unwrap(obj)


def unwrap(obj: Any) -> Any:
    """Our decorators (analyze.kernel, analyze.plot) keep what they wrap in ``func``."""
    while hasattr(obj, "func") and getattr(obj, "_nsight_agent_wrapper", False):
        obj = obj.func
    return obj
