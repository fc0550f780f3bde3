"""``python -m container``: run a container agent (the launcher starts this)."""

from __future__ import annotations

import logging
import os
import signal
import sys

from container.agent import Agent, MasterGone


def main() -> int:
    logging.basicConfig(level=os.environ.get("STRAM_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        container_id = os.environ["STRAM_CONTAINER_ID"]
        app_path = os.environ["STRAM_APP_PATH"]
        token = os.environ["STRAM_TOKEN"]
    except KeyError as missing:
        print(f"error: environment variable {missing} is not set; containers are started "
              f"by the stram master, not by hand", file=sys.stderr)
        return 2
    agent = Agent(container_id, app_path, token, work_dir=os.environ.get("STRAM_WORK_DIR"))
    signal.signal(signal.SIGTERM, lambda *_: agent.stop())
    try:
        return agent.run()
    except MasterGone as exc:
        logging.getLogger("container").error("%s; exiting", exc)
        return 3


if __name__ == "__main__":
    sys.exit(main())
