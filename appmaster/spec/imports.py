"""Importing what a spec names as ``"module:attr"``: operator classes and functions."""

from __future__ import annotations

import importlib
import re
import sys
from typing import Any

from appmaster.attributes import _show
from container.operator import Operator

__all__ = ["load_operator_class"]

_CLASS_REF_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*"
                           r":[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")


def load_operator_class(class_name: str) -> type[Operator]:
    """Import ``"module:Class"`` and check that it is an Operator subclass.

    Raises
    ------
    ValueError
        With the reason: malformed name, module not importable (with the
        ImportError), no such class (listing the operators the module has), or
        not an Operator subclass.
    """
    obj = _resolve(class_name, "Class")
    if not isinstance(obj, type):
        raise ValueError(f"{class_name!r} is not a class")
    if not issubclass(obj, Operator):
        raise ValueError(f"{class_name!r} is not a subclass of container.operator.Operator")
    return obj


def _resolve(ref: str, what: str) -> Any:
    """Import ``"module:attr.path"``; ``what`` names the object in messages."""
    if not isinstance(ref, str) or not _CLASS_REF_RE.match(ref):
        raise ValueError(f"expected 'module:{what}', got {_show(ref)}")
    module_name, _, attr_path = ref.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import module {module_name!r}: {exc}") from None
    except Exception as exc:  # a module that fails while importing
        raise ValueError(f"importing module {module_name!r} failed: "
                         f"{type(exc).__name__}: {exc}") from None
    obj: Any = module
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            hint = ""
            if obj is module and what == "Class":
                # defined there or, for a package, in one of its modules (not imported from elsewhere)
                found = [n for n, v in vars(module).items()
                         if isinstance(v, type) and issubclass(v, Operator)
                         and (v.__module__ == module_name or v.__module__.startswith(module_name + "."))]
                hint = f" (operators there: {', '.join(found)})" if found else ""
            raise ValueError(f"module {module_name!r} has no {part!r}{hint}")
        obj = getattr(obj, part)
    return obj


def _class_ref(cls: type) -> str:
    """``"module:Class"`` naming a class, by its package when the package exports it.

    A class defined in a module of a package and exported by the package
    (``container.spark.pipeline.SparkPipeline``) is named as specs name it
    (``container.spark:SparkPipeline``).
    """
    parts = cls.__module__.split(".")
    for i in range(len(parts) - 1, 0, -1):
        package = ".".join(parts[:i])
        if getattr(sys.modules.get(package), cls.__qualname__, None) is cls:
            return f"{package}:{cls.__qualname__}"
    return f"{cls.__module__}:{cls.__qualname__}"
