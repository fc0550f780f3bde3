"""stram on Hadoop YARN through Skein, by where each part runs.

* :mod:`~appmaster.yarn.appspec` — on the CLI side: the ``skein.ApplicationSpec``
  of an application (master script, container services, shipped files).
* :mod:`~appmaster.yarn.hadoopconf` — reading the client's Hadoop configuration.
* :mod:`~appmaster.yarn.driver` — skein's Java driver with a bounded
  ResourceManager wait, and the translation of its failures into stram errors.
* :mod:`~appmaster.yarn.standing` and :mod:`~appmaster.yarn.holder` — the
  standing driver (``stram driver start``) that commands reuse instead of
  starting a driver each.
* :mod:`~appmaster.yarn.client` — submit, follow, list, kill, and admin calls
  through the ResourceManager's web proxy.
* :mod:`~appmaster.yarn.launcher` — inside the master: containers as Skein
  service instances.
* :mod:`~appmaster.yarn.node` — on the nodes: HDFS checks and staging the spec
  before the master and the agents start (``python -m appmaster.yarn``).

The names below are the package's public API.
"""

from appmaster.yarn.appspec import (CONTAINER_SERVICE, DEFAULT_MAX_ATTEMPTS, STRAM_TAG, application_modules,
                                    application_spec, container_shapes, local_path_warnings)
from appmaster.yarn.client import (admin_request, admin_url_for, direct_admin_url, follow, kill_app, list_apps,
                                   submit, wait_for)
from appmaster.yarn.driver import DEFAULT_CONNECT_WAIT_MS, connect, hadoop_conf_overlay, translate
from appmaster.yarn.hadoopconf import find_hadoop_conf_dir, qualify_hdfs, read_site, rm_address
from appmaster.yarn.launcher import YarnLauncher
from appmaster.yarn.node import ALREADY_ENDED, check_hdfs, current_app_id, find_libhdfs, main, prepare_master

__all__ = [
    "STRAM_TAG", "CONTAINER_SERVICE", "DEFAULT_MAX_ATTEMPTS", "DEFAULT_CONNECT_WAIT_MS", "ALREADY_ENDED",
    "application_spec", "container_shapes", "application_modules", "local_path_warnings",
    "find_hadoop_conf_dir", "read_site", "rm_address", "qualify_hdfs",
    "connect", "hadoop_conf_overlay", "translate",
    "submit", "follow", "wait_for", "admin_request", "direct_admin_url", "admin_url_for", "list_apps", "kill_app",
    "YarnLauncher", "current_app_id", "find_libhdfs", "check_hdfs", "prepare_master", "main",
]
