"""``python -m stram.master``: run an application master (locally or as the Skein master script)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import TYPE_CHECKING

from stram.common import apppath, fs, kerberos, logsetup
from stram.common.secret import read_token_file

if TYPE_CHECKING:
    from stram.master.launch.local import LocalLauncher


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stram.master", description=__doc__)
    parser.add_argument("--app-path", default=os.environ.get("STRAM_APP_PATH"),
                        help="application directory URI [env: STRAM_APP_PATH]")
    parser.add_argument("--app-id", default=os.environ.get("STRAM_APP_ID"), help="[env: STRAM_APP_ID]")
    parser.add_argument("--launcher", choices=("local", "yarn"),
                        default=os.environ.get("STRAM_LAUNCHER", "local"), help="[env: STRAM_LAUNCHER]")
    args = parser.parse_args(argv)
    token_file = os.environ.get("STRAM_TOKEN_FILE")
    if not args.app_path or not args.app_id or not token_file:
        print("error: the master needs --app-path, --app-id and STRAM_TOKEN_FILE; "
              "start applications with `stram launch`", file=sys.stderr)
        return 2
    token = read_token_file(token_file)
    if token is None:
        print(f"error: cannot read the application token from STRAM_TOKEN_FILE={token_file}", file=sys.stderr)
        return 2
    os.umask(0o077)  # the journal, checkpoints, logs: owner-only (pickles are code to whoever writes them)
    refused = fs.check_private(args.app_path)
    if refused:
        print(f"error: the master refuses to start: {refused}", file=sys.stderr)
        return 1
    fs.keep_private(args.app_path)
    local_app_dir = fs.local_path(args.app_path)
    log_dir = os.environ.get("STRAM_LOG_DIR") or (
        os.path.join(local_app_dir, apppath.LOGS) if local_app_dir is not None else apppath.LOGS)
    os.makedirs(log_dir, exist_ok=True)
    # one copy of each line, in a rotating file; stdout/stderr (master.out) keep what is not logging
    logsetup.configure(os.path.join(log_dir, "master.log"), os.environ.get("STRAM_LOG_LEVEL", "INFO"))
    kerberos.keep_ticket()
    prestarted = _prestart_first_container(args, log_dir)  # its start overlaps this one's imports
    from stram.common.errors import StramError
    try:
        from stram.master.process.master import AppMaster
        from stram.master.process.signals import install_signal_handlers
        from stram.master.spec import AppSpec
        spec_uri = apppath.file(args.app_path, apppath.SPEC)
        spec = AppSpec.from_yaml(fs.read_bytes(spec_uri).decode(), source=spec_uri)
        if args.launcher == "yarn":
            from stram.master.launch.yarn import YarnLauncher
            launcher = YarnLauncher.from_current()
        else:
            from stram.master.launch.local import LocalLauncher
            launcher = prestarted or LocalLauncher(log_dir, app_id=args.app_id)
        master = AppMaster(spec, args.app_id, args.app_path, token, launcher, tune_gc=True)
    except StramError as exc:  # a bad spec, no YARN container, a journal this stram cannot resume from
        logging.getLogger("stram.master").error("cannot run application %s: %s", args.app_id, exc)
        _say_why(args.app_path, str(exc))
        if prestarted is not None:
            prestarted.release_held()
        return 1
    except Exception as exc:  # noqa: BLE001 - a broken installation (an import that fails) and the like
        logging.getLogger("stram.master").exception("cannot run application %s", args.app_id)
        _say_why(args.app_path, f"{type(exc).__name__}: {exc}")
        if prestarted is not None:
            prestarted.release_held()
        return 1
    install_signal_handlers(master)
    try:
        state = master.run()
    except BaseException as exc:  # noqa: BLE001 - never hang on with a live server and nobody deciding
        logging.getLogger("stram.master").exception("application master %s failed; exiting (the next "
                                                 "attempt resumes from the journal)", args.app_id)
        _say_why(args.app_path, f"{type(exc).__name__}: {exc}")
        try:
            master.stop()
        finally:
            logging.shutdown()
            os._exit(1)
    logging.getLogger("stram.master").info("application %s ended %s", args.app_id, state)
    return 0 if state == "SUCCEEDED" else 1


def _say_why(app_path: str, reason: str) -> None:
    """Leave why this attempt ends in ``APP_PATH/master-error.json`` for the local supervisor (best effort)."""
    import json
    try:
        fs.write_atomic(apppath.file(app_path, apppath.MASTER_ERROR), json.dumps({"reason": reason}).encode())
    except Exception:  # noqa: BLE001 - the log has it; a full disk must not hide the exit
        pass


def _prestart_first_container(args: argparse.Namespace, log_dir: str) -> LocalLauncher | None:
    """A local launcher that has already started the first container of a fresh application
    (no journal yet), held until the plan asks for it (``LocalLauncher.prestart``); None when
    containers run elsewhere, or the application resumes (its containers are known)."""
    if args.launcher != "local" or os.environ.get("STRAM_PRESTART", "1") == "0":
        return None
    journal = fs.local_path(apppath.journal(args.app_path))
    if journal is None or os.path.exists(journal):
        return None
    from stram.master.launch.local import FIRST_CONTAINER_ID, LocalLauncher, container_request_env
    launcher = LocalLauncher(log_dir, app_id=args.app_id)
    launcher.prestart(FIRST_CONTAINER_ID, container_request_env(FIRST_CONTAINER_ID, args.app_path, args.app_id))
    return launcher


if __name__ == "__main__":
    logsetup.exit_fast(main())
