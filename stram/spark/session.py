"""The process's SparkSession: started once with stram's defaults, the ``stram`` source registered."""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
import time
from typing import Any

from stram.spark.errors import first_line
from stram.spark.source import StramDataSource

__all__ = ["get_session"]

log = logging.getLogger("stram.spark")

_session_lock = threading.Lock()
_session: Any = None


def _repo_root() -> str:
    """The directory holding the ``container`` package (``stram/spark/session.py`` is three levels down)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def get_session(conf: dict[str, Any] | None = None, app_name: str = "stram") -> Any:
    """The process's SparkSession, started on first use.

    Python workers of Spark run ``sys.executable`` with the repository root
    (and the current directory) on their ``PYTHONPATH``, so they import
    ``container`` and the application's modules. Static settings
    (``spark.master``…) apply only when the session starts; later callers
    share it.

    Parameters
    ----------
    conf : dict, optional
        Settings for the builder; ``spark.master`` defaults to ``local[*, 4]``
        (every core, up to 4 attempts per task).
    app_name : str
        Spark application name.
    """
    global _session
    with _session_lock:
        if _session is not None:
            try:
                alive = not _session.sparkContext._jsc.sc().isStopped()
            except Exception:  # noqa: BLE001 - a dead gateway: start anew
                alive = False
            if alive:
                for key, value in (conf or {}).items():
                    if key.startswith("spark.sql."):  # runtime settings apply to the shared session
                        try:
                            _session.conf.set(key, str(value))
                        except Exception:  # noqa: BLE001 - a static setting: ignored
                            pass
                return _session
            _session = None
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        for extra in (os.getcwd(), _repo_root()):
            if extra not in paths:
                paths.insert(0, extra)
        os.environ["PYTHONPATH"] = os.pathsep.join(paths)
        from pyspark.sql import SparkSession

        settings: dict[str, Any] = {
            "spark.master": "local[*, 4]",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": str(max(2, os.cpu_count() or 2)),
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.streaming.stopTimeout": "10s",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
        }
        settings.update({k: str(v) if not isinstance(v, str) else v for k, v in (conf or {}).items()})
        if not str(settings["spark.master"]).startswith("local"):
            settings.pop("spark.driver.host", None)
            settings.pop("spark.driver.bindAddress", None)
        builder = SparkSession.builder.appName(app_name)
        for key, value in settings.items():
            builder = builder.config(key, value)
        for attempt in range(3):
            try:
                session = builder.getOrCreate()
                break
            except Exception as exc:  # noqa: BLE001
                # Forking the JVM's launcher from a process running gRPC threads fails now and then
                # (the child dies in gRPC's fork handler): try again.
                if "JAVA_GATEWAY_EXITED" not in str(exc) or attempt == 2:
                    raise
                log.warning("the Spark JVM did not start (%s); trying again", first_line(exc))
                time.sleep(1.0)
        session.sparkContext.setLogLevel(str(settings.get("spark.log.level", "WARN")).upper())
        session.dataSource.register(StramDataSource)
        _session = session
        atexit.register(_stop_session)
        return session


def _stop_session() -> None:
    global _session
    session, _session = _session, None
    if session is not None:
        try:
            session.stop()
        except Exception:  # noqa: BLE001 - the JVM may be gone already
            pass
