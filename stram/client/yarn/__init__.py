"""stram on Hadoop YARN through Skein, by where each part runs.

* :mod:`~stram.client.yarn.appspec` — on the CLI side: the ``skein.ApplicationSpec``
  of an application (master script, container services, shipped files).
* :mod:`~stram.common.hadoopconf` — reading the client's Hadoop configuration.
* :mod:`~stram.client.yarn.driver` — skein's Java driver with a bounded
  ResourceManager wait, and the translation of its failures into stram errors.
* :mod:`~stram.client.yarn.standing` and :mod:`~stram.client.yarn.holder` — the
  standing driver (``stram driver start``) that commands reuse instead of
  starting a driver each.
* :mod:`~stram.client.yarn.client` — submit, follow, list, kill, and admin calls
  through the ResourceManager's web proxy.

Inside the application, the master's side lives in :mod:`stram.master.launch`
(``yarn``: containers as Skein service instances; ``yarnnode``: HDFS checks and
staging the spec on the nodes).

The names below are the package's public API.
"""

from stram.client.yarn.appspec import (CONTAINER_SERVICE, DEFAULT_MAX_ATTEMPTS, STRAM_TAG, application_modules,
                                       application_spec, container_shapes, local_path_warnings)
from stram.client.yarn.client import (admin_request, admin_url_for, direct_admin_url, follow, kill_app, list_apps,
                                      submit, wait_for)
from stram.client.yarn.driver import DEFAULT_CONNECT_WAIT_MS, connect, hadoop_conf_overlay, translate
from stram.common.hadoopconf import find_hadoop_conf_dir, qualify_hdfs, read_site, rm_address

__all__ = [
    "STRAM_TAG", "CONTAINER_SERVICE", "DEFAULT_MAX_ATTEMPTS", "DEFAULT_CONNECT_WAIT_MS",
    "application_spec", "container_shapes", "application_modules", "local_path_warnings",
    "find_hadoop_conf_dir", "read_site", "rm_address", "qualify_hdfs",
    "connect", "hadoop_conf_overlay", "translate",
    "submit", "follow", "wait_for", "admin_request", "direct_admin_url", "admin_url_for", "list_apps", "kill_app",
]
