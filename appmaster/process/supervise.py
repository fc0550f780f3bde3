"""``python -m stram.master.process.supervise``: a local application's master attempts, as YARN runs them.

On YARN the ResourceManager starts a new master attempt when the master dies
without a final state (up to ``max_attempts``). Locally this process does it:
``stram launch`` starts it (:func:`start`, detached or followed in the
foreground); it starts the master (``python -m stram.master``), waits for it,
and when the master exits and ``status.json`` is not final it starts the next
attempt (which resumes from the journal), up to the spec's
``MASTER_ATTEMPTS`` (default 2, at most 20), waiting longer before each attempt
that follows a short-lived one (1 s, doubling up to a minute), and saying so in
``status.json``. After the last attempt it stops what is left of the
application's containers and writes ``status.json`` FAILED with the reason the
last attempt gave (``master-error.json``: a corrupt journal names the file and
what is wrong). SIGTERM is passed on to the master (which kills the
application), or ends a wait between attempts, and no new attempt follows:
``stram kill-app`` stops an application whose master is down this way.

``APP_PATH/supervisor.json`` names this process (pid and start time) for
:mod:`stram.common.apps`: an application whose supervisor and master are both
gone is never shown RUNNING.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

import psutil

from stram.common import apppath, fs
from stram.common.apps import TERMINAL, process_alive, read_json

__all__ = ["DEFAULT_ATTEMPTS", "Supervisor", "start", "kill_without_master", "main"]

#: Master attempts when the spec does not say (YARN's default max_attempts as well).
DEFAULT_ATTEMPTS = 2
#: Seconds before the attempt that follows a short-lived one, doubling with each in a row, up to the most.
FIRST_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 60.0
#: An attempt that ran at least this long was not short-lived: the next one starts at once.
SHORT_LIVED_SECONDS = 60.0


def _process_id(pid: int) -> dict[str, Any]:
    return {"pid": pid, "started": psutil.Process(pid).create_time()}


def start(app_id: str, app_dir: str, env: dict[str, str], cwd: str, max_attempts: int,
          detach: bool) -> subprocess.Popen:
    """Start the supervisor of a local application in its own session; its process.

    Detached, its output goes to ``logs/supervisor.log``; in the foreground it
    shares the caller's stderr (so messages about new attempts are seen).
    """
    cmd = [sys.executable, "-m", "stram.master.process.supervise", "--app-dir", app_dir, "--app-id", app_id,
           "--max-attempts", str(max_attempts)]
    if detach:
        fd = os.open(os.path.join(app_dir, apppath.LOGS, "supervisor.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                     0o600)
        with os.fdopen(fd, "ab") as out:
            proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
    else:
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        doc = _process_id(proc.pid)
    except psutil.Error:
        doc = {"pid": proc.pid, "started": 0.0}
    fs.write_local_atomic(os.path.join(app_dir, apppath.SUPERVISOR), json.dumps(doc).encode())
    return proc


def _exit_reason(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class Supervisor:
    """Runs master attempts of one local application until one ends it, or none is left.

    Parameters
    ----------
    app_id, app_dir:
        The application and its local directory (``APP_PATH`` without ``file://``).
    max_attempts:
        Master attempts in all (the first included).
    """

    def __init__(self, app_id: str, app_dir: str, max_attempts: int = DEFAULT_ATTEMPTS) -> None:
        self.app_id = app_id
        self.app_dir = app_dir
        self.max_attempts = max(1, max_attempts)
        self.attempt = 0
        self.master: subprocess.Popen | None = None
        self.stopping = False
        #: Short-lived attempts in a row (each doubles the wait before the next).
        self.short_lived = 0

    def status(self) -> dict[str, Any]:
        return read_json(os.path.join(self.app_dir, apppath.STATUS)) or {}

    def start_master(self) -> subprocess.Popen:
        with open(os.path.join(self.app_dir, apppath.LOGS, "master.out"), "ab") as out:
            return subprocess.Popen(
                [sys.executable, "-m", "stram.master", "--app-path", f"file://{self.app_dir}",
                 "--app-id", self.app_id],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def stop(self, *_: Any) -> None:
        """SIGTERM: pass it on to the master (it kills the application); no new attempt."""
        self.stopping = True
        if self.master is not None and self.master.poll() is None:
            self.master.terminate()

    def last_reason(self) -> str:
        """What the master that just exited said of why (``master-error.json``, consumed), or ""."""
        path = os.path.join(self.app_dir, apppath.MASTER_ERROR)
        doc = read_json(path) or {}
        try:
            os.unlink(path)
        except OSError:
            pass
        return str(doc.get("reason") or "")

    def backoff(self, ran_seconds: float) -> float:
        """Seconds to wait before the next attempt, after one that ran ``ran_seconds``."""
        if ran_seconds >= SHORT_LIVED_SECONDS:
            self.short_lived = 0
            return 0.0
        self.short_lived += 1
        return min(MAX_BACKOFF_SECONDS, FIRST_BACKOFF_SECONDS * 2 ** (self.short_lived - 1))

    def run(self) -> str:
        """Attempts until the application ends; its final state."""
        while True:
            self.attempt += 1
            started = time.monotonic()
            self.master = self.start_master()
            code = self.master.wait()
            state = self.status().get("state")
            if state in TERMINAL:
                return state
            how = _exit_reason(code)
            reason = self.last_reason()
            if reason:
                how += f": {reason}"
            if self.stopping:
                return self.give_up("KILLED", f"killed; its master exited ({how}) without a final state")
            if self.attempt >= self.max_attempts:
                return self.give_up("FAILED", f"the application master exited without a final state in "
                                              f"each of {self.attempt} attempts (last: {how}; "
                                              f"MASTER_ATTEMPTS={self.max_attempts})")
            wait = self.backoff(time.monotonic() - started)
            note = (f"master attempt {self.attempt} of {self.max_attempts} exited ({how}) without a final "
                    f"state; attempt {self.attempt + 1} starts" + (f" in {wait:.0f} s" if wait else ""))
            self.note(note)
            _say("\n" + note)
            deadline = time.monotonic() + wait
            while not self.stopping and time.monotonic() < deadline:
                time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
            if self.stopping:
                return self.give_up("KILLED", f"killed between master attempts (the last: {how})")

    def note(self, diagnostics: str) -> None:
        """Say what happens in a status that is not final (the next master attempt rewrites it)."""
        status = self.status()
        status.update(id=self.app_id, diagnostics=diagnostics)
        status.setdefault("state", "RUNNING")
        status.setdefault("name", "")
        try:
            fs.write_status_file(os.path.join(self.app_dir, apppath.STATUS), json.dumps(status).encode(), local=True)
        except OSError as exc:
            _say(f"could not write status.json: {exc}")

    def give_up(self, state: str, diagnostics: str) -> str:
        """No master is left: stop the application's containers, write the final status."""
        stopped = stop_containers(self.app_id)
        if stopped:
            diagnostics += f"; stopped {stopped} container process(es) left running"
        status = self.status()
        status.update(id=self.app_id, state=state, diagnostics=diagnostics,
                      finished_millis=int(time.time() * 1000))
        status.setdefault("name", "")
        try:  # on a full disk: in place
            fs.write_status_file(os.path.join(self.app_dir, apppath.STATUS), json.dumps(status).encode(), local=True)
        except OSError as exc:
            _say(f"could not write status.json: {exc}")
        _say(f"{self.app_id} {state}: {diagnostics}")
        return state


def _say(text: str) -> None:
    """A line on stderr (``supervisor.log`` when detached); a full disk loses the line, not the supervisor."""
    try:
        print(text, file=sys.stderr, flush=True)
    except OSError:
        pass


def stop_containers(app_id: str, grace: float = 5.0) -> int:
    """SIGTERM, then SIGKILL, every container process of ``app_id``: a process whose own
    environment carries ``STRAM_APP_ID=<app_id>`` and a ``STRAM_CONTAINER_ID`` (an application
    id is unique, so no other process is touched); how many there were."""
    procs = []
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
            if env.get("STRAM_APP_ID") == app_id and "STRAM_CONTAINER_ID" in env and proc.pid != os.getpid():
                procs.append(proc)
        except psutil.Error:
            continue
    for proc in procs:
        try:
            proc.terminate()  # psutil refuses a pid reused since
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
    return len(procs)


def kill_without_master(app_id: str, app_dir: str, timeout: float = 30.0) -> str:
    """Kill a local application whose master does not answer; what was done, for the user.

    Its supervisor, if it runs, is told (SIGTERM: it ends the master or its wait between
    attempts, stops the containers and writes KILLED); with no supervisor either, the
    containers are stopped and KILLED written here.
    """
    doc = read_json(os.path.join(app_dir, apppath.SUPERVISOR))
    if process_alive(doc):
        try:
            psutil.Process(int(doc["pid"])).terminate()
        except psutil.Error:
            pass
        else:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if (read_json(os.path.join(app_dir, apppath.STATUS)) or {}).get("state") in TERMINAL:
                    return "its supervisor stopped it"
                time.sleep(0.2)
    supervisor = Supervisor(app_id, app_dir)
    supervisor.give_up("KILLED", "killed while neither its master nor its supervisor ran")
    return "stopped its containers (neither its master nor its supervisor ran)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stram.master.process.supervise", description=__doc__.split("\n")[0])
    parser.add_argument("--app-dir", required=True, help="the application's local directory")
    parser.add_argument("--app-id", required=True)
    parser.add_argument("--max-attempts", type=int, default=DEFAULT_ATTEMPTS)
    args = parser.parse_args(argv)
    os.umask(0o077)  # status.json and the master's files: owner-only
    fs.keep_private(args.app_dir)
    supervisor = Supervisor(args.app_id, args.app_dir, args.max_attempts)
    signal.signal(signal.SIGTERM, supervisor.stop)
    signal.signal(signal.SIGINT, supervisor.stop)
    state = supervisor.run()
    return 0 if state == "SUCCEEDED" else 1


if __name__ == "__main__":
    sys.exit(main())
