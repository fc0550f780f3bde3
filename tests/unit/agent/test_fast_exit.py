"""logsetup.exit_fast: a process ends without the interpreter's finalization, but nothing that
finalization did for others is lost: exit handlers, files left open, the exit code, live threads,
temporary directories.

Each test runs a real Python process that ends through ``exit_fast``. Every one of them fails
with the reverted ``logging.shutdown(); os._exit(code)`` (94454b8).

A probe tells which way a process ended: an object whose ``__del__`` writes a file. Module
teardown (the normal exit) runs it; the fast path does not (the tests where the normal exit
must be taken show that the probe works).
"""

from __future__ import annotations

import gzip
import os
import pathlib
import subprocess
import sys
import textwrap

from conftest import ROOT


PROBE = """
import os, sys
class _Probe:  # what it needs is bound now: module teardown clears sys.argv before it runs this
    def __init__(self, path, write=open):
        self.path, self.write = path, write
    def __del__(self):
        self.write(self.path, "w").close()
_probe = _Probe(os.path.join(sys.argv[1], "teardown"))
"""


def run(tmp_path: pathlib.Path, body: str) -> subprocess.CompletedProcess:
    """Run ``body`` (with :data:`PROBE` before it) as a script; ``sys.argv[1]`` is ``tmp_path``."""
    script = PROBE + textwrap.dedent(body)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env, capture_output=True,
                          text=True, timeout=60)


def fast(tmp_path: pathlib.Path) -> bool:
    """Whether the process ended without module teardown (the probe's ``__del__`` never ran)."""
    return not (tmp_path / "teardown").exists()


def test_atexit_handlers_run_last_registered_first(tmp_path):
    done = run(tmp_path, """
        import atexit, logging
        from stram.common import logsetup
        logsetup.configure(os.path.join(sys.argv[1], "x.log"))  # flushed by logging's own handler
        logging.getLogger("x").info("the last line")
        def write(name):
            with open(os.path.join(sys.argv[1], "order"), "a") as f:
                f.write(name)
        atexit.register(write, "first ")
        atexit.register(write, "second ")
        atexit.register(print, "said at exit")
        logsetup.exit_fast(0)
    """)
    assert done.returncode == 0, done.stderr
    assert fast(tmp_path)
    assert (tmp_path / "order").read_text() == "second first "
    assert done.stdout == "said at exit\n"
    assert "the last line" in (tmp_path / "x.log").read_text()


def test_files_left_open_keep_all_their_data(tmp_path):
    done = run(tmp_path, """
        import gzip
        from stram.common import logsetup
        logsetup.freeze_startup()  # as the container does before its operators run
        d = sys.argv[1]
        text = open(os.path.join(d, "text"), "w")
        text.write("line\\n" * 100)
        binary = open(os.path.join(d, "binary"), "wb")
        binary.write(b"\\x01" * 1000)
        both = open(os.path.join(d, "random"), "w+b")
        both.write(b"r" * 10)
        zipped = gzip.open(os.path.join(d, "zipped.gz"), "wt")
        zipped.write("compressed\\n" * 50)
        piped = os.fdopen(os.open(os.path.join(d, "fd"), os.O_WRONLY | os.O_CREAT), "w")
        piped.write("via fdopen")
        kept = [text, binary, both, zipped, piped]  # none closed, none flushed
        print("to stdout", end="")
        print("to stderr", end="", file=sys.stderr)
        logsetup.exit_fast(0, flush_files=True)
    """)
    assert done.returncode == 0, done.stderr
    assert fast(tmp_path)
    assert (tmp_path / "text").read_text() == "line\n" * 100
    assert (tmp_path / "binary").read_bytes() == b"\x01" * 1000
    assert (tmp_path / "random").read_bytes() == b"r" * 10
    assert gzip.decompress((tmp_path / "zipped.gz").read_bytes()) == b"compressed\n" * 50  # trailer too
    assert (tmp_path / "fd").read_text() == "via fdopen"
    assert (done.stdout, done.stderr) == ("to stdout", "to stderr")


def test_files_frozen_by_someone_else_are_flushed_too(tmp_path):
    done = run(tmp_path, """
        import gc
        from stram.common import logsetup
        logsetup.freeze_startup()
        f = open(os.path.join(sys.argv[1], "out"), "w")
        f.write("kept")
        gc.freeze()  # a user's operator froze it: it must not hide among the startup's objects
        logsetup.exit_fast(0, flush_files=True)
    """)
    assert done.returncode == 0, done.stderr
    assert fast(tmp_path)
    assert (tmp_path / "out").read_text() == "kept"


def test_exit_code_as_sys_exit_gives_it(tmp_path):
    for code, status in (("0", 0), ("3", 3), ("None", 0), ("-1", 255), ("True", 1)):
        done = run(tmp_path, f"""
            import atexit
            from stram.common import logsetup
            atexit.register(print, "handler ran")
            logsetup.exit_fast({code})
        """)
        assert done.returncode == status, (code, done.stderr)
        assert done.stdout == "handler ran\n", code
        assert done.stderr == "", code
    done = run(tmp_path, """
        from stram.common import logsetup
        logsetup.exit_fast("cannot go on")
    """)
    assert done.returncode == 1
    assert done.stderr == "cannot go on\n"


def test_a_live_thread_gets_the_normal_exit(tmp_path):
    done = run(tmp_path, """
        import threading, time
        from stram.common import logsetup
        def late():
            time.sleep(0.3)
            open(os.path.join(sys.argv[1], "late"), "w").close()
        threading.Thread(target=late).start()
        logsetup.exit_fast(4)
    """)
    assert done.returncode == 4, done.stderr
    assert (tmp_path / "late").exists()
    assert not fast(tmp_path)


def test_a_busy_pool_worker_gets_the_normal_exit_even_when_daemon(tmp_path):
    # a pool's workers started from a daemon thread are daemon threads; a normal exit still
    # joins them (concurrent.futures waits for its workers), so a fast exit may not cut them off
    done = run(tmp_path, """
        import threading, time
        from concurrent.futures import ThreadPoolExecutor
        from stram.common import logsetup
        pool = ThreadPoolExecutor(1)
        def late():
            time.sleep(0.3)
            open(os.path.join(sys.argv[1], "late"), "w").close()
        starter = threading.Thread(target=pool.submit, args=(late,), daemon=True)
        starter.start(); starter.join()
        assert all(t.daemon for t in threading.enumerate() if t is not threading.main_thread())
        logsetup.exit_fast(0)
    """)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "late").exists()
    assert not fast(tmp_path)


def test_threads_that_end_soon_or_are_daemons_keep_the_fast_path(tmp_path):
    done = run(tmp_path, """
        import threading, time
        from concurrent.futures import ThreadPoolExecutor
        from stram.common import logsetup
        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
        def soon():
            time.sleep(0.01)
            open(os.path.join(sys.argv[1], "soon"), "w").close()
        threading.Thread(target=soon).start()
        pool = ThreadPoolExecutor(2)
        pool.submit(time.sleep, 0.01)
        pool.shutdown(wait=False)  # as the master's umbilical pool
        logsetup.exit_fast(0)
    """)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "soon").exists()
    assert fast(tmp_path)


def test_temporary_directories_and_finalizers_are_cleaned(tmp_path):
    done = run(tmp_path, """
        import tempfile, weakref
        from stram.common import logsetup
        class Resource:
            pass
        kept = Resource()
        weakref.finalize(kept, print, "finalized")
        scratch = tempfile.TemporaryDirectory(dir=sys.argv[1])
        open(os.path.join(scratch.name, "f"), "w").close()
        print(scratch.name)
        logsetup.exit_fast(0)
    """)
    assert done.returncode == 0, done.stderr
    assert fast(tmp_path)
    name, said = done.stdout.splitlines()
    assert said == "finalized"
    assert not os.path.exists(name)
