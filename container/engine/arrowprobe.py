"""Keep pyarrow from importing pandas into a container that has no use for it.

The first time pyarrow turns a Python value into Arrow (``pa.array``, ``pa.scalar``, a compute
function given a Python number) it imports pandas, if installed, to check whether the value is a
pandas object: about 0.26 s of CPU and 48 MB (pandas and numpy) in every container, though no
operator of it uses pandas. :func:`settle` lets that first check find pandas absent when none of
the container's operators imported it, so pyarrow never looks again; its explicit pandas
functions (``Table.from_pandas``, ``to_pandas``) still import and use pandas when called.

One thing differs then, until pyarrow's first explicit pandas call (which brings its pandas
integration back): ``pa.array`` given a pandas object treats it as the NumPy array it holds (a
missing float is NaN, not null). A container keeps the integration from the start when an operator
module it deploys imports pandas at its top (pandas is loaded before the check), or when its
environment has ``STRAM_PYARROW_PANDAS=1``.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

log = logging.getLogger("stram.agent.engine.arrowprobe")

__all__ = ["settle"]

_settled = False


class _NoPandas:
    """A meta-path finder that refuses to import pandas (while pyarrow looks)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError("pandas is not imported into this container (stram.agent.engine.arrowprobe)")


def settle() -> bool:
    """Let pyarrow decide now, without importing it, that pandas is absent, unless pandas is
    loaded already, pyarrow's check already ran, or ``STRAM_PYARROW_PANDAS=1``; pyarrow not yet
    imported: right after its import. Whether it did so now."""
    global _settled
    if _settled or "pandas" in sys.modules or os.environ.get("STRAM_PYARROW_PANDAS") == "1":
        return False
    if "pyarrow" not in sys.modules:  # a container that may never need it: not imported for this
        if not any(isinstance(f, _AfterPyarrow) for f in sys.meta_path):
            sys.meta_path.insert(0, _AfterPyarrow())
        return False
    _settled = True
    import pyarrow as pa
    finder = _NoPandas()
    sys.meta_path.insert(0, finder)
    try:
        pa.array([0])  # pyarrow's one check for pandas, which now fails to import it
    except Exception as exc:  # noqa: BLE001 - a pyarrow that checks otherwise: leave it be
        log.debug("pyarrow's pandas check: %s", exc)
        return False
    finally:
        sys.meta_path.remove(finder)
    return True


class _AfterPyarrow:
    """A meta-path finder that, once, lets pyarrow be imported as usual and then calls :func:`settle`."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "pyarrow":
            return None
        sys.meta_path.remove(self)
        import importlib.util
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _SettleAfter(spec.loader)
        return spec


class _SettleAfter:
    """pyarrow's own loader, then :func:`settle`."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.loader.exec_module(module)
        settle()

    def __getattr__(self, name: str) -> Any:  # the rest of the loader's interface, as it is
        return getattr(self.loader, name)
