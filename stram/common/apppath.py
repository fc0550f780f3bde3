"""The layout of an application's directory (``APP_PATH``): every file the master, agents and CLI share.

``APP_PATH`` is a file-system URI (``file://…`` locally, ``hdfs://…`` on
YARN); these functions only build URIs, :mod:`stram.common.fs` reads and writes
them. Written by the master: :data:`HEARTBEAT_URI` (its gRPC ``host:port``),
:data:`ADMIN` (admin API URL and pid), :data:`STATUS` (state and diagnostics),
:data:`JOURNAL` (its state, for a new attempt). Written by a local
application's supervisor: :data:`SUPERVISOR`. Written at launch:
:data:`SPEC` (the resolved spec). Written by the master for each container before it starts: its credential
(:func:`credential`). Written by agents: operator checkpoints,
receiver write-ahead logs and Spark checkpoints. Local applications keep
their logs in :data:`LOGS`.
"""

from __future__ import annotations

from stram.common import fs

__all__ = ["HEARTBEAT_URI", "ADMIN", "SUPERVISOR", "STATUS", "JOURNAL", "SPEC", "LOGS", "TOKEN", "CREDENTIALS", "file", "credential", "journal", "checkpoints",
           "checkpoint", "wal", "spark_checkpoint"]

#: The master's gRPC address, ``host:port``; agents read it to find their master.
HEARTBEAT_URI = "heartbeatUri"
#: ``{"url": admin API base URL, "pid": master pid}`` while a master runs.
ADMIN = "admin.json"
#: ``{"pid", "started"}`` of the process that starts a local application's master attempts.
SUPERVISOR = "supervisor.json"
#: The application's state, diagnostics and times; terminal once the application ended.
STATUS = "status.json"
#: ``{"reason"}``: why a master attempt could not go on (a corrupt journal, a bad spec), written as
#: it exits, so that whoever starts the next attempt (or gives up) can say why.
MASTER_ERROR = "master-error.json"
#: The master's journal directory (a new attempt resumes from it).
JOURNAL = "journal"
#: The resolved spec the master runs.
SPEC = "spec.yaml"
#: Log files of a local application (the master's and one per container).
LOGS = "logs"
#: The application's secret, readable by its owner only, on the machine that launched it.
TOKEN = "token"
#: Each container's own credential, one file per container id, written by the master.
CREDENTIALS = "credentials"


def file(app_path: str, name: str) -> str:
    """The URI of one of the named files above, e.g. ``file(app_path, STATUS)``."""
    return fs.join(app_path, name)


def journal(app_path: str) -> str:
    """The journal's snapshot document."""
    return fs.join(app_path, JOURNAL, "snapshot")


def checkpoints(app_path: str, operator_id: int | None = None) -> str:
    """The checkpoint directory of the application, or of one physical operator."""
    root = fs.join(app_path, "checkpoints")
    return root if operator_id is None else fs.join(root, str(operator_id))


def checkpoint(app_path: str, operator_id: int, window_id: int) -> str:
    """An operator's state after window ``window_id``."""
    return fs.join(app_path, "checkpoints", str(operator_id), str(window_id))


def credential(app_path: str, container_id: str) -> str:
    """Container ``container_id``'s credential (:func:`stram.common.secret.container_credential`)."""
    return fs.join(app_path, CREDENTIALS, container_id)


def wal(app_path: str, operator_id: int) -> str:
    """A receiver's write-ahead log directory."""
    return fs.join(app_path, "wal", str(operator_id))


def spark_checkpoint(app_path: str, name: str) -> str:
    """A SparkPipeline's Spark checkpoint location (``name``: the operator's name and partition)."""
    return fs.join(app_path, "spark", name)
