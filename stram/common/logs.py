"""An application's logs, for ``stram logs``: where they are and how to read them.

Every stram process logs into its own file named after it: the master into
``master.log``, a container agent into ``<container id>.log`` (for example
``container_000003.log``); a full file is rotated to ``NAME.1``, ``NAME.2``, ...
What a process prints outside logging (a crash's traceback) lands beside it
in ``NAME.out`` locally.

- A local application keeps them in ``<app dir>/logs`` (``supervisor.log`` is
  the supervisor's, which starts master attempts).
- On YARN they are in the YARN container's log directory, where the
  NodeManager's log pages show them and from where log aggregation collects
  them. ``stram logs`` reads them with Hadoop's ``yarn logs`` command, which
  serves running containers from the NodeManagers and ended ones from the
  aggregated logs; every attempt of the master has a ``master.log``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from typing import Callable, Iterator

from stram.common.errors import StramError, UserError

__all__ = ["LogFile", "MASTER", "local_logs", "logs_in", "pick", "yarn_logs", "render", "tail_lines", "follow_files"]

#: The master's log name; a container's is ``<container id>.log``.
MASTER = "master"
_ROTATED = re.compile(r"^(?P<base>.+?)(?:\.(?P<n>\d+))?$")


@dataclass
class LogFile:
    """One log: a name (``master.log``), where it came from, and a way to read it."""

    name: str
    where: str
    size: int
    read: Callable[[], str]


def log_name(process: str) -> str:
    """``master`` -> ``master.log``; ``container_000002`` -> ``container_000002.log``."""
    return process if process.endswith(".log") else f"{process}.log"


def _rotation_key(filename: str) -> tuple[str, int]:
    """Sort a base file after its rotated pieces, oldest (highest number) first."""
    match = _ROTATED.match(filename)
    assert match is not None
    number = int(match.group("n")) if match.group("n") else 0
    return match.group("base"), -number


def _read_text(path: str) -> str:
    with open(path, "rb") as f:
        return f.read().decode("utf-8", "replace")


def local_logs(app_dir: str) -> list[LogFile]:
    """Every log file of a local application, rotated pieces in time order."""
    return logs_in(os.path.join(app_dir, "logs"))


def logs_in(logs_dir: str) -> list[LogFile]:
    """Every log file in a directory (a local application's ``logs``), rotated pieces in time order."""
    if not os.path.isdir(logs_dir):
        return []
    names = [n for n in os.listdir(logs_dir) if os.path.isfile(os.path.join(logs_dir, n))]
    return [LogFile(n, logs_dir, os.path.getsize(os.path.join(logs_dir, n)),
                    lambda p=os.path.join(logs_dir, n): _read_text(p))
            for n in sorted(names, key=_rotation_key)]


def pick(logs: list[LogFile], process: str | None, everything: bool = False) -> list[LogFile]:
    """The logs of ``process`` (default the master), with rotated pieces and the ``.out`` beside it.

    Raises
    ------
    UserError
        Nothing is logged under that name; the message lists what is.
    """
    if everything:
        return logs
    wanted = log_name(process or MASTER)
    stem = wanted[:-len(".log")]
    found = [f for f in logs if f.name == wanted or f.name.startswith(wanted + ".")
             or (f.name == f"{stem}.out" and f.size > 0)]
    if not found:
        known = sorted({_ROTATED.match(f.name).group("base") for f in logs})  # type: ignore[union-attr]
        raise UserError(f"no log for '{process or MASTER}'; the application has: "
                        f"{', '.join(known) or 'no logs yet'}")
    return found


# ---------------------------------------------------------------- YARN

#: Seconds ``yarn logs`` may take (it starts a JVM and asks the NodeManagers or HDFS).
YARN_LOGS_TIMEOUT = 180.0


def _yarn_command() -> str:
    path = shutil.which("yarn")
    if path is None:
        raise StramError("reading a YARN application's logs needs Hadoop's `yarn` command on PATH "
                         "(the NodeManager's log pages, behind the tracking URL, show them too)")
    return path


def parse_yarn_logs(text: str) -> list[tuple[str, str, str]]:
    """``yarn logs`` output as ``(container, log name, contents)``, in the order printed.

    Each log is printed as ``Container: <id> on <host>`` ... ``LogType:<name>``
    ... ``LogLength:<n>`` ``LogContents:`` then the contents, then
    ``End of LogType:<name>``.
    """
    out: list[tuple[str, str, str]] = []
    container = name = ""
    lines = text.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("Container: "):
            container = line.split()[1]
        elif line.startswith("LogType:"):
            name = line[len("LogType:"):].strip()
        elif line.startswith("LogContents:"):
            body: list[str] = []
            i += 1
            while i < len(lines) and not lines[i].startswith(f"End of LogType:{name}"):
                body.append(lines[i])
                i += 1
            out.append((container, name, "".join(body)))
        i += 1
    return out


def yarn_logs(app_id: str, process: str | None, everything: bool = False,
              run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> list[LogFile]:
    """A YARN application's logs of ``process`` (default the master: every attempt's), via ``yarn logs``.

    Raises
    ------
    StramError
        No ``yarn`` command, or it failed (it names why: an unknown
        application, logs not aggregated, ...).
    """
    command = [_yarn_command(), "logs", "-applicationId", app_id]
    if not everything:
        wanted = log_name(process or MASTER)
        command += ["-log_files_pattern", "^" + re.escape(wanted) + r"(\.\d+)?$"]
    try:
        proc = run(command, capture_output=True, text=True, timeout=YARN_LOGS_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise StramError(f"`yarn logs -applicationId {app_id}` did not answer in "
                         f"{YARN_LOGS_TIMEOUT:g}s") from None
    sections = parse_yarn_logs(proc.stdout)
    if not sections:
        detail = " ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        what = "logs" if everything else f"log '{log_name(process or MASTER)}'"
        raise StramError(f"YARN has no {what} for {app_id}"
                         + (f": {detail}" if detail else "")
                         + ("" if everything else "; `stram logs APP --all` shows every log"))
    sections.sort(key=lambda s: (s[0], _rotation_key(s[1])))
    return [LogFile(name, container, len(body), lambda b=body: b) for container, name, body in sections]


# ---------------------------------------------------------------- printing

def render(files: list[LogFile], tail: int | None = None) -> str:
    """The text of ``files``: one log's rotated pieces joined in time order, a header before each
    log when there are several (or several containers had one, e.g. master attempts on YARN)."""
    groups: dict[tuple[str, str], list[LogFile]] = {}
    for f in files:
        groups.setdefault((f.where, _rotation_key(f.name)[0]), []).append(f)
    parts = []
    for (where, base), pieces in groups.items():
        text = tail_lines("".join(p.read() for p in pieces), tail)
        if len(groups) > 1:
            text = f"==> {where}/{base} <==\n{text}" + ("" if not text or text.endswith("\n") else "\n")
        parts.append(text)
    return "".join(parts)


def tail_lines(text: str, count: int | None) -> str:
    """The last ``count`` lines of ``text`` (all of it for None)."""
    if count is None:
        return text
    if count <= 0:
        return ""
    lines = text.splitlines(keepends=True)
    return "".join(lines[-count:])


def follow_files(paths: list[str], interval: float = 0.5,
                 running: Callable[[], bool] = lambda: True) -> Iterator[str]:
    """New text appended to ``paths`` (from their current ends), until ``running()`` is false.

    A file rotated away (replaced by a new, shorter one) is read from its start.
    """
    offsets = {p: (os.path.getsize(p) if os.path.exists(p) else 0) for p in paths}
    while True:
        alive = running()
        for path in paths:
            try:
                size = os.path.getsize(path)
            except OSError:
                continue
            if size < offsets[path]:
                offsets[path] = 0  # rotated: a new file under the same name
            if size > offsets[path]:
                with open(path, "rb") as f:
                    f.seek(offsets[path])
                    chunk = f.read(size - offsets[path])
                offsets[path] = size
                yield chunk.decode("utf-8", "replace")
        if not alive:
            return
        time.sleep(interval)
