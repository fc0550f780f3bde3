"""Loading what stram names as ``"module:attr"``: operator classes, unifiers, listeners, Spark pipelines.

One loader for every such reference, so each is checked, imported and
reported the same way; callers add their own context to the message.
"""

from __future__ import annotations

import importlib
import re
from typing import Any, Callable

__all__ = ["ReferenceLoadError", "load_reference", "load_class"]

_REF_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*"
                     r":[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")


class ReferenceLoadError(ValueError):
    """A ``"module:attr"`` reference that cannot be loaded; the message says why.

    Attributes
    ----------
    module:
        The module part (None when the reference is malformed).
    missing:
        The attribute the module lacks (None unless that was the problem).
    cause:
        The exception importing the module raised, if that was the problem.
    """

    def __init__(self, message: str, module: str | None = None, missing: str | None = None,
                 cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.module = module
        self.missing = missing
        self.cause = cause


def load_reference(ref: Any, what: str = "attr",
                   hint: Callable[[Any, str], str] | None = None) -> Any:
    """The object ``"module:attr.path"`` names.

    Parameters
    ----------
    ref:
        The reference.
    what:
        What it should name, for messages (``Class``, ``function``).
    hint:
        Called as ``hint(module, name)`` when the module lacks ``name``; its
        text (e.g. what the module does have) ends the message.

    Raises
    ------
    ReferenceLoadError
        Malformed reference, a module that cannot be imported (with the
        error it raised) or that lacks the attribute.
    """
    if not isinstance(ref, str) or not _REF_RE.match(ref):
        raise ReferenceLoadError(f"expected 'module:{what}', got {ref!r}")
    module_name, _, attr_path = ref.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ReferenceLoadError(f"cannot import module {module_name!r}: {exc}", module_name,
                                 cause=exc) from None
    except SystemExit as exc:  # sys.exit() on import: the caller must not exit with it
        raise ReferenceLoadError(f"importing module {module_name!r} called sys.exit({exc.code!r}); a module "
                                 f"stram loads must not exit on import", module_name, cause=exc) from None
    except Exception as exc:  # noqa: BLE001 - a module that fails while importing
        raise ReferenceLoadError(f"importing module {module_name!r} failed: {type(exc).__name__}: {exc}",
                                 module_name, cause=exc) from None
    obj: Any = module
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            extra = hint(module, part) if hint is not None and obj is module else ""
            raise ReferenceLoadError(f"module {module_name!r} has no {part!r}{extra}", module_name,
                                     missing=part)
        obj = getattr(obj, part)
    return obj


def load_class(class_name: str) -> type:
    """The class ``"module:Class"`` names (see :func:`load_reference`)."""
    return load_reference(class_name, "Class")
