"""``python -m appmaster.yarn``: the steps the stram YARN scripts run on the nodes (see :mod:`appmaster.yarn.node`)."""

import sys

from appmaster.yarn.node import main

sys.exit(main())
