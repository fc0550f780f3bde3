"""``python -m stram``: the ``stram`` command line."""

import sys

from stram.client.cli import main

sys.exit(main())
