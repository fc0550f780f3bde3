"""Reading the Hadoop configuration of the client machine: where it is, its ``*-site.xml`` values, the RM address.

Used on the CLI side (qualifying ``hdfs:///`` URIs, naming the
ResourceManager in error messages) and by the driver's configuration overlay.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from typing import Mapping

__all__ = ["find_hadoop_conf_dir", "read_site", "rm_address", "qualify_hdfs"]


def qualify_hdfs(uri: str, conf_dir: str | None = None) -> str:
    """``hdfs:///path`` with the NameNode of ``fs.defaultFS`` filled in, when the configuration names one.

    pyarrow turns a URI without an authority into the NameNode ``hdfs://``,
    which Hadoop rejects; the cluster's default file system (from
    core-site.xml in the Hadoop configuration directory) makes it explicit:
    ``hdfs://nn.example.com:8020/path`` or, with HA, ``hdfs://nameservice/path``.
    Other URIs come back unchanged.
    """
    if not uri.startswith("hdfs:///"):
        return uri
    conf_dir = conf_dir or find_hadoop_conf_dir()
    default_fs = read_site(os.path.join(conf_dir, "core-site.xml")).get("fs.defaultFS", "") if conf_dir else ""
    authority = default_fs.split("://", 1)[1].split("/", 1)[0] if default_fs.startswith("hdfs://") else ""
    return f"hdfs://{authority}/{uri[len('hdfs:///'):]}" if authority else uri


def find_hadoop_conf_dir(env: Mapping[str, str] | None = None) -> str | None:
    """The Hadoop configuration directory: HADOOP_CONF_DIR, YARN_CONF_DIR, $HADOOP_HOME/etc/hadoop, /etc/hadoop/conf."""
    env = os.environ if env is None else env
    for candidate in (env.get("HADOOP_CONF_DIR"), env.get("YARN_CONF_DIR"),
                      os.path.join(env["HADOOP_HOME"], "etc", "hadoop") if env.get("HADOOP_HOME") else None,
                      "/etc/hadoop/conf"):
        if candidate and os.path.isfile(os.path.join(candidate, "yarn-site.xml")):
            return candidate
    return None


def read_site(path: str) -> dict[str, str]:
    """name -> value of a Hadoop ``*-site.xml`` (empty when missing or unreadable)."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return {}
    out = {}
    for prop in root.iter("property"):
        name, value = prop.findtext("name"), prop.findtext("value")
        if name:
            out[name.strip()] = (value or "").strip()
    return out


def rm_address(conf_dir: str) -> str:
    """The ResourceManager address(es) ``conf_dir`` names, for messages (``host:port``, HA: comma-separated)."""
    site = read_site(os.path.join(conf_dir, "yarn-site.xml"))
    if site.get("yarn.resourcemanager.address"):
        return site["yarn.resourcemanager.address"]
    ids = [i.strip() for i in site.get("yarn.resourcemanager.ha.rm-ids", "").split(",") if i.strip()]
    if ids:
        return ", ".join(site.get(f"yarn.resourcemanager.address.{i}")
                         or f"{site.get(f'yarn.resourcemanager.hostname.{i}', '?')}:8032" for i in ids)
    return f"{site.get('yarn.resourcemanager.hostname', '0.0.0.0')}:8032"
