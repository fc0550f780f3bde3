"""Importing what a spec names as ``"module:attr"``: operator classes and functions."""

from __future__ import annotations

import importlib
import os
import sys
import threading
from typing import Any

from stram.common.attributes import show
from stram.common.imports import ReferenceLoadError, load_reference
from stram.operator import Operator

__all__ = ["load_operator_class"]


def load_operator_class(class_name: str) -> type[Operator]:
    """Import ``"module:Class"`` and check that it is an Operator subclass.

    Raises
    ------
    ValueError
        With the reason: malformed name, module not importable (with the
        ImportError), no such class (listing the operators the module has), or
        not an Operator subclass.
    """
    obj = resolve(class_name, "Class")
    if not isinstance(obj, type):
        raise ValueError(f"{class_name!r} is not a class")
    if not issubclass(obj, Operator):
        raise ValueError(f"{class_name!r} is not a subclass of stram.operator.Operator")
    return obj


def _operators_hint(module: Any, name: str) -> str:
    """The operators a module (or, for a package, its modules) defines, for a misspelt class name."""
    module_name = module.__name__
    found = [n for n, v in vars(module).items()
             if isinstance(v, type) and issubclass(v, Operator)
             and (v.__module__ == module_name or v.__module__.startswith(module_name + "."))]
    return f" (operators there: {', '.join(found)})" if found else ""


def resolve(ref: str, what: str) -> Any:
    """Import ``"module:attr.path"``; ``what`` names the object in messages."""
    if not isinstance(ref, str):
        raise ValueError(f"expected 'module:{what}', got {show(ref)}")
    _refuse_old_name(ref)
    _probe_import(ref.partition(":")[0])
    try:
        return load_reference(ref, what, hint=_operators_hint if what == "Class" else None)
    except ReferenceLoadError as exc:
        if exc.module is None:
            raise ValueError(f"expected 'module:{what}', got {show(ref)}") from None
        raise ValueError(str(exc)) from None


#: Where the built-ins were before stram became one package: a spec naming one is told the new name.
_RENAMED = {
    "container.operators": "stram.operators",
    "container.connectors": "stram.connectors",
    "container.receivers": "stram.receivers",
    "container.spark": "stram.spark",
    "container.operator": "stram",
}


def _refuse_old_name(ref: str) -> None:
    """A ValueError naming the new name of a reference to a built-in's old module."""
    module, _, attr = ref.partition(":")
    for old, new in _RENAMED.items():
        if module == old or module.startswith(old + "."):
            raise ValueError(f"{ref!r} is a name from before stram's one package; "
                             f"use '{new}{module[len(old):]}:{attr}'")


#: stram's own package: trusted, never probed.
_OWN = ("stram",)


def _probe_import(module_name: str) -> None:
    """Import a user module first in a forked child, so that one ending the process on import
    (``os._exit``, a signal) gives a spec error naming it instead of a silent exit code.

    Cheap (a fork, then the import) and done once per module and process; skipped
    for stram's own modules, modules already imported, without ``fork`` and when
    other threads run (forking them is unsafe). ``sys.exit`` is caught in-process
    by :func:`stram.common.imports.load_reference`.
    """
    if not module_name or module_name in sys.modules or module_name.split(".")[0] in _OWN \
            or not hasattr(os, "fork") or threading.active_count() > 1:
        return
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: import, say it came back, leave without running any cleanup
        os.close(read_end)
        try:
            importlib.import_module(module_name)
        except BaseException:  # noqa: BLE001 - the parent imports it again and reports it
            pass
        os.write(write_end, b"ok")
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        answer = pipe.read()
    _, status = os.waitpid(pid, 0)
    if answer != b"ok":
        raise ValueError(f"importing module {module_name!r} ended the process (exit code "
                         f"{os.waitstatus_to_exitcode(status)}: os._exit or a signal); a module "
                         f"used in a spec must not exit on import")


def class_ref(cls: type) -> str:
    """``"module:Class"`` naming a class, by its package when the package exports it.

    A class defined in a module of a package and exported by the package
    (``stram.spark.pipeline.SparkPipeline``) is named as specs name it
    (``stram.spark:SparkPipeline``).
    """
    parts = cls.__module__.split(".")
    for i in range(len(parts) - 1, 0, -1):
        package = ".".join(parts[:i])
        if getattr(sys.modules.get(package), cls.__qualname__, None) is cls:
            return f"{package}:{cls.__qualname__}"
    return f"{cls.__module__}:{cls.__qualname__}"
