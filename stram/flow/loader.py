"""Running an app file (``stram launch app.py``) and finding the :class:`~stram.flow.Flow` it defines.

The file runs with :mod:`runpy` under the module name :data:`APP_MODULE`, with
its directory first on ``sys.path`` (so it imports its neighbours). That name
is registered with cloudpickle to pickle *by value*: the functions and classes
the file defines travel inside the spec, and the containers, which cannot
import the file, still run them.
"""

from __future__ import annotations

import os
import runpy
import sys
import types
from typing import Any

import cloudpickle

from stram.flow.errors import FlowError
from stram.flow.flow import Flow

__all__ = ["APP_MODULE", "run_app", "load_flow"]

#: The module name an app file runs under (never importable elsewhere, so never pickled by reference).
APP_MODULE = "__stram_app__"


def run_app(path: str) -> dict[str, Any]:
    """Run the app file ``path``; its module-level names.

    Raises
    ------
    FlowError
        The file does not exist, or running it raised (the message gives the exception).
    """
    if not os.path.isfile(path):
        raise FlowError(f"{path}: no such app file")
    here = os.path.dirname(os.path.abspath(path))
    if here not in sys.path:
        sys.path.insert(0, here)
    # cloudpickle pickles by value what a registered module defines; runpy swaps its own module in
    # under this name while the file runs, so the registration covers pickling during and after the run
    placeholder = sys.modules.setdefault(APP_MODULE, types.ModuleType(APP_MODULE))
    cloudpickle.register_pickle_by_value(placeholder)
    try:
        return runpy.run_path(path, run_name=APP_MODULE)
    except SystemExit as exc:
        raise FlowError(f"{path}: the app file called sys.exit({exc.code!r}) while it ran; it must define a "
                        f"Flow and return") from None
    except FlowError as exc:
        raise FlowError(f"{path}{_line(path, exc)}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - the user's file failed: say where, not a traceback of ours
        raise FlowError(f"{path}: running the app file failed{_line(path, exc)}: {type(exc).__name__}: "
                        f"{exc}") from None


def _line(path: str, exc: BaseException) -> str:
    """`` (line N)``: the app file's line the exception came through last, if any."""
    import traceback
    mine = os.path.abspath(path)
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if os.path.abspath(f.filename) == mine]
    return f" (line {frames[-1].lineno})" if frames else ""


def load_flow(path: str) -> Flow:
    """The one module-level :class:`Flow` the app file ``path`` defines.

    Raises
    ------
    FlowError
        The file fails, or defines no Flow or several (the message lists what it found).
    """
    names = run_app(path)
    flows = {name: value for name, value in names.items() if isinstance(value, Flow) and not name.startswith("__")}
    if len(flows) == 1:
        return next(iter(flows.values()))
    if not flows:
        found = sorted(n for n, v in names.items() if not n.startswith("__") and not isinstance(v, types.ModuleType))
        raise FlowError(f"{path} defines no Flow at module level (found: {', '.join(found) or 'nothing'}); "
                        f"assign one to a module-level name, e.g. flow = Flow('my-app')")
    distinct = {id(f) for f in flows.values()}
    if len(distinct) == 1:  # one flow under several names
        return next(iter(flows.values()))
    listing = ", ".join(f"{n} ({f.name!r})" for n, f in flows.items())
    raise FlowError(f"{path} defines several Flows at module level: {listing}; keep one (build the others "
                    f"inside a function)")
