"""stram on YARN: the Skein spec, the real Java driver, the master's launcher end to end, HDFS checks.

What is real and what stands in (no YARN or HDFS cluster runs on this machine):

* spec tests: every ``skein.ApplicationSpec`` is checked by skein's own model
  (``from_yaml(to_yaml()) == spec``); nothing stands in.
* ``test_submit_without_resourcemanager_*``: skein's real Java driver, started
  by the real ``stram launch --yarn`` with PySpark's Hadoop client jars; only
  the ``yarn`` command (tests/kits/yarn_shim/yarn, which prints that classpath) and
  the ResourceManager (an address where nothing listens) are missing on purpose.
* ``test_yarn_launcher_runs_wordcount*``: the real AppMaster, YarnLauncher,
  container agents and buffer servers, running the generated Skein service
  script with bash in per-container directories where the service's files
  were localized as YARN would. The only stand-in is the object in place of
  ``skein.ApplicationClient`` (``StandInApplicationClient`` below).
* Everything real, on a mini Hadoop cluster: tests/e2e/yarn/test_yarn_cluster.py.
"""

from __future__ import annotations

import contextlib
import datetime
import http.server
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time
import types
import zipfile
from collections import Counter
from typing import Any

import pytest
import skein
import yaml
from conftest import ROOT, read_counts, word_truth

from stram.client import cli, yarn
from stram.common import hadoopconf
from stram.common.errors import ClusterUnreachable, StramError, UserError
from stram.master.launch import yarn as yarnlauncher
from stram.master.launch import yarnnode
from stram.master.launch.local import ContainerRequest
from stram.master.spec import AppSpec

WORDCOUNT = ROOT / "specs" / "wordcount.yaml"
WORDS = ROOT / "specs" / "data" / "words.txt"
MOBY = ROOT / "specs" / "data" / "moby-dick.txt"
SHIM = ROOT / "tests" / "kits" / "yarn_shim"


def roundtrip(aspec: Any) -> Any:
    """skein's own model must take the spec back unchanged."""
    again = skein.ApplicationSpec.from_yaml(aspec.to_yaml())
    assert again == aspec
    return again


def small_spec(tmp_path: pathlib.Path, attributes: dict | None = None, count_attributes: dict | None = None,
               count_class: str = "stram.operators.aggregate:KeyCounter") -> AppSpec:
    data = {
        "name": "small",
        "attributes": attributes or {},
        "operators": {
            "reader": {"class": "stram.operators.io:LineReader", "properties": {"path": "hdfs:///in.txt"}},
            "count": {"class": count_class, **({"attributes": count_attributes} if count_attributes else {})},
        },
        "streams": {"lines": {"from": "reader.output", "to": ["count.input"]}},
    }
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return AppSpec.from_file(path)


# ====================================================================== the ApplicationSpec

@pytest.fixture(autouse=True)
def _no_cluster_config(monkeypatch):
    """Tests see no Hadoop configuration unless they make one (a dev box may have /etc/hadoop/conf)."""
    for var in ("HADOOP_CONF_DIR", "YARN_CONF_DIR", "HADOOP_HOME", "STRAM_PYTHON_ENV", "STRAM_YARN_APPS_DIR",
                "STRAM_YARN_APP_PATH", "STRAM_YARN_NODE_LABEL", "STRAM_YARN_PRINCIPAL", "STRAM_YARN_KEYTAB"):
        monkeypatch.delenv(var, raising=False)
    real = yarn.find_hadoop_conf_dir
    monkeypatch.setattr(hadoopconf, "find_hadoop_conf_dir",
                        lambda env=None: real(env) if (env or os.environ).get("HADOOP_CONF_DIR") else None)


def token_of(master_or_service) -> str:
    """The token an application spec's master (or service) gets in its localized token file."""
    return pathlib.Path(master_or_service.files["stram.token"].source[len("file://"):]).read_text()


def test_wordcount_application_spec(tmp_path):
    spec = AppSpec.from_file(WORDCOUNT)
    aspec = roundtrip(yarn.application_spec(spec, str(WORDCOUNT), staging_dir=str(tmp_path)))
    assert aspec.name == "wordcount"
    assert aspec.queue == "default"
    assert aspec.tags == {"stram"}
    assert aspec.max_attempts == 2
    assert aspec.node_label == ""

    master = aspec.master
    assert (master.resources.memory, master.resources.vcores) == (1024, 1)
    lines = master.script.splitlines()
    # Skein's application master (a JVM) gets java.util opened: its web UI's overview page, the
    # tracking URL, lists stram's page through reflection that Java 17 refuses otherwise; no
    # other java of the master's container gets it (the script unsets it first)
    assert master.env["JDK_JAVA_OPTIONS"] == "--add-opens=java.base/java.util=ALL-UNNAMED"
    assert lines[1] == "unset JDK_JAVA_OPTIONS" and lines[2] == "set -e"
    assert lines[-1] == "exec python -m stram.master --launcher yarn"
    assert 'export STRAM_APP_ID="${STRAM_APP_ID:-$SKEIN_APPLICATION_ID}"' in lines
    assert "python -m stram.master.launch.yarnnode prepare-master spec.yaml" in lines
    assert set(master.env) == {"STRAM_APP_PATH", "STRAM_TOKEN_FILE", "STRAM_LAUNCHER", "PYTHONUNBUFFERED", "STRAM_USER",
                               "JDK_JAVA_OPTIONS"}
    assert master.env["STRAM_APP_PATH"].startswith(f"hdfs:///user/{yarn.appspec._hadoop_user(None)}/.stram/apps/wordcount-")
    # the token is a private localized file, never in the environment
    assert master.env["STRAM_TOKEN_FILE"] == "stram.token"
    token = token_of(master)
    assert len(token) == 32 and int(token, 16) >= 0
    assert str(master.files["stram.token"].visibility) == "APPLICATION"
    assert os.stat(master.files["stram.token"].source[len("file://"):]).st_mode & 0o777 == 0o600
    assert token not in aspec.to_yaml()
    # the resolved spec is shipped to the master and loads back equal
    spec_file = master.files["spec.yaml"]
    assert str(spec_file.type) == "FILE"
    assert AppSpec.from_yaml(pathlib.Path(spec_file.source[len("file://"):]).read_text()) == spec
    # an editable install: stram's own packages travel in the app archive
    assert str(master.files["app"].type) == "ARCHIVE"
    assert f'export PATH="{sys.prefix}/bin:$PATH"' in lines

    assert list(aspec.services) == ["container"]
    service = aspec.services["container"]
    assert service.instances == 0
    assert (service.resources.memory, service.resources.vcores) == (1024, 1)
    assert service.max_restarts == 0 and service.allow_failures is True
    assert service.script.splitlines()[-1] == "exec python -m stram.agent"
    assert 'python -m stram.master.launch.yarnnode check-hdfs "$STRAM_APP_PATH"' in service.script
    # containers never get the application's token: each reads a credential of its own under APP_PATH
    assert set(service.files) == {"app"} and "spec.yaml" not in service.files
    assert service.env == {"PYTHONUNBUFFERED": "1"}
    # a new token and a new application directory for every launch
    other = yarn.application_spec(spec, str(WORDCOUNT), staging_dir=str(tmp_path / "2"))
    assert token_of(other.master) != token
    assert other.master.env["STRAM_APP_PATH"] != master.env["STRAM_APP_PATH"]


def test_spec_attributes_and_options(tmp_path):
    spec = small_spec(tmp_path, attributes={
        "MASTER_MEMORY_MB": 2048, "MASTER_VCORES": 2, "CONTAINER_MEMORY_MB": 512, "VCORES": 2,
        "QUEUE": "streaming", "APPLICATION_TAGS": ["team-a", "nightly"]},
        count_attributes={"MEMORY_MB": 4096})
    aspec = roundtrip(yarn.application_spec(spec, None, staging_dir=str(tmp_path / "s"),
                                            app_path="hdfs://nn.example.com:8020/apps/small-1",
                                            node_label="streaming", token="t0k3n", max_attempts=3))
    assert aspec.queue == "streaming"
    assert aspec.tags == {"stram", "team-a", "nightly"}
    assert aspec.node_label == "streaming"
    assert aspec.max_attempts == 3
    assert aspec.file_systems == ["hdfs://nn.example.com:8020"]
    assert (aspec.master.resources.memory, aspec.master.resources.vcores) == (2048, 2)
    assert aspec.master.env["STRAM_APP_PATH"] == "hdfs://nn.example.com:8020/apps/small-1"
    assert token_of(aspec.master) == "t0k3n" and "t0k3n" not in aspec.to_yaml()
    shapes = {name: (s.resources.memory, s.resources.vcores) for name, s in aspec.services.items()}
    assert shapes == {"container": (512, 2), "container-4096mb-2vc": (4096, 2)}
    assert all(s.instances == 0 for s in aspec.services.values())
    # an explicit queue wins over the spec's
    assert yarn.application_spec(spec, None, queue="adhoc", staging_dir=str(tmp_path / "q")).queue == "adhoc"


def test_apps_dir_and_user_defaults(tmp_path, monkeypatch):
    spec = small_spec(tmp_path)
    monkeypatch.setenv("HADOOP_USER_NAME", "alice")
    aspec = yarn.application_spec(spec, None, staging_dir=str(tmp_path / "a"))
    assert aspec.master.env["STRAM_APP_PATH"].startswith("hdfs:///user/alice/.stram/apps/small-")
    aspec = yarn.application_spec(spec, None, staging_dir=str(tmp_path / "b"), principal="bob/host@EXAMPLE.COM")
    assert aspec.master.env["STRAM_APP_PATH"].startswith("hdfs:///user/bob/.stram/apps/small-")
    monkeypatch.setenv("STRAM_YARN_APPS_DIR", "hdfs://nn:8020/stram/")
    aspec = yarn.application_spec(spec, None, staging_dir=str(tmp_path / "c"))
    assert aspec.master.env["STRAM_APP_PATH"].startswith("hdfs://nn:8020/stram/small-")
    # hdfs:/// gets the cluster's NameNode (pyarrow cannot connect to the NameNode "hdfs://")
    monkeypatch.delenv("STRAM_YARN_APPS_DIR")
    conf = tmp_path / "conf"
    conf.mkdir()
    write_site(conf / "yarn-site.xml", {})
    write_site(conf / "core-site.xml", {"fs.defaultFS": "hdfs://mycluster"})
    monkeypatch.setenv("HADOOP_CONF_DIR", str(conf))
    aspec = yarn.application_spec(spec, None, staging_dir=str(tmp_path / "d"))
    assert aspec.master.env["STRAM_APP_PATH"].startswith("hdfs://mycluster/user/alice/.stram/apps/small-")
    assert yarn.qualify_hdfs("hdfs:///x/y") == "hdfs://mycluster/x/y"
    assert yarn.qualify_hdfs("hdfs://nn:8020/x") == "hdfs://nn:8020/x"
    assert yarn.qualify_hdfs("file:///x") == "file:///x"
    write_site(conf / "core-site.xml", {"fs.defaultFS": "file:///"})
    assert yarn.qualify_hdfs("hdfs:///x/y") == "hdfs:///x/y"


def test_python_environment_archive_or_existing_path(tmp_path, monkeypatch):
    spec = small_spec(tmp_path)
    archive = tmp_path / "env.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        (tmp_path / "bin").mkdir()
        (tmp_path / "bin" / "activate").write_text("# activate\n")
        tf.add(tmp_path / "bin", arcname="bin")
    aspec = roundtrip(yarn.application_spec(spec, None, python_env=str(archive), staging_dir=str(tmp_path / "a")))
    for files, script in ((aspec.master.files, aspec.master.script),
                          (aspec.services["container"].files, aspec.services["container"].script)):
        assert files["environment"].source == f"file://{archive}"
        assert str(files["environment"].type) == "ARCHIVE"
        assert "source environment/bin/activate" in script.splitlines()
    # the same from the environment variable, and an archive already on HDFS
    monkeypatch.setenv("STRAM_PYTHON_ENV", "hdfs:///envs/stram.tgz")
    aspec = roundtrip(yarn.application_spec(spec, None, staging_dir=str(tmp_path / "b")))
    assert aspec.master.files["environment"].source == "hdfs:///envs/stram.tgz"
    monkeypatch.delenv("STRAM_PYTHON_ENV")
    # an environment that exists on every node: nothing shipped, its bin first on PATH
    for given in ("/opt/envs/stram", "/opt/envs/stram/bin/python3"):
        aspec = roundtrip(yarn.application_spec(spec, None, python_env=given, staging_dir=str(tmp_path / "c")))
        assert "environment" not in aspec.master.files
        assert 'export PATH="/opt/envs/stram/bin:$PATH"' in aspec.master.script.splitlines()
    for bad, words in ((str(tmp_path / "missing.tar.gz"), "venv-pack"),
                       ("relative/env", "absolute path"),
                       ("hdfs:///envs/stram", "must be an archive")):
        with pytest.raises(StramError, match=words):
            yarn.application_spec(spec, None, python_env=bad, staging_dir=str(tmp_path / "d"))


def test_application_modules_are_shipped(tmp_path, monkeypatch):
    pkg = tmp_path / "code" / "myapp_ops"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "from stram.operator import Operator, InputPort, OutputPort\n\n"
        "class Shout(Operator):\n"
        "    input = InputPort()\n"
        "    output = OutputPort()\n\n"
        "    def process_input(self, tuple):\n"
        "        self.output.emit({'key': str(tuple).upper(), 'count': 1, 'total': 1})\n")
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "junk.pyc").write_bytes(b"")
    (tmp_path / "code" / "helpers.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    spec = small_spec(tmp_path, count_class="myapp_ops:Shout")
    assert yarn.application_modules(spec) == [str(pkg.resolve())]

    aspec = roundtrip(yarn.application_spec(spec, None, staging_dir=str(tmp_path / "s"), ship_stram=False))
    archive = aspec.master.files["app"].source[len("file://"):]
    assert aspec.services["container"].files["app"].source == aspec.master.files["app"].source
    assert zipfile.ZipFile(archive).namelist() == ["myapp_ops/__init__.py"]
    assert 'export PYTHONPATH="$PWD/app${PYTHONPATH:+:$PYTHONPATH}"' in aspec.master.script.splitlines()

    names = zipfile.ZipFile(yarn.application_spec(spec, None, staging_dir=str(tmp_path / "t"), ship_stram=True)
                            .master.files["app"].source[len("file://"):]).namelist()
    assert "myapp_ops/__init__.py" in names and "stram/client/yarn/appspec.py" in names
    assert "stram/agent/agent.py" in names and "stram/master/core/state.py" in names
    assert "stram/wire/stram_pb2.py" in names and not any(n.endswith(".pyc") for n in names)

    # only stram's own operators, stram installed: nothing to ship, no PYTHONPATH line
    plain = yarn.application_spec(small_spec(tmp_path), None, staging_dir=str(tmp_path / "u"), ship_stram=False)
    assert "app" not in plain.master.files and "PYTHONPATH" not in plain.master.script


def test_keytab_is_shipped_and_used(tmp_path):
    spec = small_spec(tmp_path)
    keytab = tmp_path / "alice.keytab"
    keytab.write_bytes(b"\x05\x02")
    aspec = roundtrip(yarn.application_spec(spec, None, principal="alice@EXAMPLE.COM", keytab=str(keytab),
                                            staging_dir=str(tmp_path / "s")))
    for files, env, script in ((aspec.master.files, aspec.master.env, aspec.master.script),
                               (aspec.services["container"].files, aspec.services["container"].env,
                                aspec.services["container"].script)):
        assert files["stram.keytab"].source == f"file://{keytab}"
        assert env["STRAM_PRINCIPAL"] == "alice@EXAMPLE.COM"
        lines = script.splitlines()
        assert 'kinit -kt "$STRAM_KEYTAB" "$STRAM_PRINCIPAL"' in lines
        assert 'STRAM_KEYTAB="$PWD/stram.keytab"' in lines[lines.index('kinit -kt "$STRAM_KEYTAB" "$STRAM_PRINCIPAL"') - 1]
        # HDFS with the ticket the process renews, not with delegation tokens that die
        assert "unset HADOOP_TOKEN_FILE_LOCATION" in lines
    with pytest.raises(StramError, match="keytab .* does not exist"):
        yarn.application_spec(spec, None, principal="a@B", keytab=str(tmp_path / "nope"),
                              staging_dir=str(tmp_path / "t"))


def test_dry_run_prints_a_valid_skein_spec(tmp_path, capsys):
    assert cli.main(["launch", "--yarn", "--dry-run", str(WORDCOUNT), "-D", "QUEUE=etl",
                     "-D", "operators.reader.path=hdfs:///data/words.txt"]) == 0
    aspec = roundtrip(skein.ApplicationSpec.from_yaml(capsys.readouterr().out))
    assert aspec.queue == "etl" and aspec.name == "wordcount"
    shipped = AppSpec.from_yaml(pathlib.Path(aspec.master.files["spec.yaml"].source[len("file://"):]).read_text())
    assert shipped.operators["reader"].properties["path"] == "hdfs:///data/words.txt"
    # no secret is made for a dry run: the token file holds a placeholder, and the printed spec no token
    assert token_of(aspec.master) == cli.DRY_RUN_TOKEN
    assert "STRAM_TOKEN" not in aspec.master.env and aspec.master.env["STRAM_TOKEN_FILE"] == "stram.token"


def test_local_path_warnings():
    spec = AppSpec.from_file(WORDCOUNT)
    warnings = yarn.local_path_warnings(spec)
    assert len(warnings) == 2
    assert warnings[0].startswith("operators.reader.path is the local path 'specs/data/words.txt'")
    spec = AppSpec.from_file(WORDCOUNT, overrides=["operators.reader.path=hdfs:///in",
                                                   "operators.out.path=hdfs:///out"])
    assert yarn.local_path_warnings(spec) == []


# ====================================================================== the driver's configuration

def write_site(path: pathlib.Path, props: dict[str, Any]) -> None:
    body = "".join(f"<property><name>{k}</name><value>{v}</value></property>" for k, v in props.items())
    path.write_text(f"<?xml version='1.0'?><configuration>{body}</configuration>")


def test_conf_overlay_bounds_the_resourcemanager_wait(tmp_path, monkeypatch):
    monkeypatch.delenv("STRAM_YARN_CONNECT_WAIT_MS", raising=False)
    conf = tmp_path / "conf"
    conf.mkdir()
    write_site(conf / "yarn-site.xml", {"yarn.resourcemanager.address": "rm:8032"})
    write_site(conf / "core-site.xml", {"fs.defaultFS": "hdfs://nn:8020", "ipc.client.connect.max.retries": "4"})
    (conf / "hadoop-env.sh").write_text("export X=1\n")
    out = yarn.hadoop_conf_overlay(str(conf), str(tmp_path / "o1"))
    site = yarn.read_site(os.path.join(out, "yarn-site.xml"))
    assert site["yarn.resourcemanager.address"] == "rm:8032"
    assert site["yarn.resourcemanager.connect.max-wait.ms"] == str(yarn.DEFAULT_CONNECT_WAIT_MS)
    assert site["yarn.resourcemanager.connect.retry-interval.ms"] == "5000"
    assert site["ipc.client.connect.retry.interval"] == "500"
    assert "ipc.client.connect.max.retries" not in site  # the cluster's own choice stays
    assert (tmp_path / "o1" / "hadoop-env.sh").read_text() == "export X=1\n"
    assert (conf / "yarn-site.xml").read_text().count("<property>") == 1  # the original is untouched

    write_site(conf / "yarn-site.xml", {"yarn.resourcemanager.connect.max-wait.ms": "2000"})
    site = yarn.read_site(os.path.join(yarn.hadoop_conf_overlay(str(conf), str(tmp_path / "o2")), "yarn-site.xml"))
    assert site["yarn.resourcemanager.connect.max-wait.ms"] == "2000"
    assert site["yarn.resourcemanager.connect.retry-interval.ms"] == "400"
    monkeypatch.setenv("STRAM_YARN_CONNECT_WAIT_MS", "1500")
    site = yarn.read_site(os.path.join(yarn.hadoop_conf_overlay(str(conf), str(tmp_path / "o3")), "yarn-site.xml"))
    assert site["yarn.resourcemanager.connect.max-wait.ms"] == "1500"
    assert list(site).count("yarn.resourcemanager.connect.max-wait.ms") == 1


def launch_args(**kw: Any) -> types.SimpleNamespace:
    return types.SimpleNamespace(spec=str(WORDCOUNT), define=None, detach=True, duration=None, **kw)


@pytest.mark.parametrize("setup, words", [
    ("java_home_without_java", "JAVA_HOME=.* has no bin/java"),
    ("no_java", "Java was not found"),
    ("no_yarn", "the `yarn` command is not on PATH"),
    ("no_conf", "HADOOP_CONF_DIR is not set"),
    ("conf_without_yarn_site", "has no yarn-site.xml"),
])
def test_missing_pieces_are_clear_errors(tmp_path, monkeypatch, capsys, setup, words):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("yarn", "java"):
        (bin_dir / tool).write_text("#!/bin/sh\nexit 1\n")
        (bin_dir / tool).chmod(0o755)
    conf = tmp_path / "conf"
    conf.mkdir()
    write_site(conf / "yarn-site.xml", {"yarn.resourcemanager.address": "127.0.0.1:1"})
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.delenv("YARN_CONF_DIR", raising=False)
    monkeypatch.delenv("HADOOP_HOME", raising=False)
    monkeypatch.setenv("HADOOP_CONF_DIR", str(conf))
    if setup == "java_home_without_java":
        monkeypatch.setenv("JAVA_HOME", str(tmp_path / "not-a-jdk"))
    elif setup == "no_java":
        (bin_dir / "java").unlink()
    elif setup == "no_yarn":
        (bin_dir / "yarn").unlink()
    elif setup == "no_conf":
        monkeypatch.delenv("HADOOP_CONF_DIR")
        monkeypatch.setattr(hadoopconf, "find_hadoop_conf_dir", lambda env=None: None)
    elif setup == "conf_without_yarn_site":
        (conf / "yarn-site.xml").unlink()
        monkeypatch.setattr(hadoopconf, "find_hadoop_conf_dir", lambda env=None: None)
    code = cli.main(["launch", "--yarn", str(WORDCOUNT), "--detach"])
    err = capsys.readouterr().err
    assert code == 1
    assert "Traceback" not in err
    assert re.search(words, err.splitlines()[-1]), err


def test_driver_errors_are_translated(tmp_path):
    conf = tmp_path / "conf"
    conf.mkdir()
    write_site(conf / "yarn-site.xml", {"yarn.resourcemanager.address": "rm.example.com:8032"})
    refused = skein.exceptions.DriverError(
        "Failed to submit application, exception:\nCall From h/1.2.3.4 to rm.example.com:8032 failed on "
        "connection exception: java.net.ConnectException: Connection refused")
    err = yarn.translate(refused, "submitting x", str(conf))
    assert isinstance(err, ClusterUnreachable)
    assert str(err).startswith("no ResourceManager answers at rm.example.com:8032 (yarn.resourcemanager.address "
                               f"in {conf}/yarn-site.xml) while submitting x.")
    err = yarn.translate(skein.exceptions.DriverError("GSS initiate failed: No valid credentials provided "
                                                       "(Mechanism level: Failed to find any Kerberos tgt)"),
                          "listing", str(conf))
    assert "kinit" in str(err)
    log = tmp_path / "driver.log"
    log.write_text("Error: Could not find or load main class com.anaconda.skein.Driver\n")
    err = yarn.translate(skein.exceptions.DriverError("Failed to start java process"), "starting", str(conf), str(log))
    assert "exited before it was ready" in str(err) and "Could not find or load main class" in str(err)
    write_site(conf / "yarn-site.xml", {"yarn.resourcemanager.ha.rm-ids": "rm1,rm2",
                                        "yarn.resourcemanager.hostname.rm1": "a",
                                        "yarn.resourcemanager.address.rm2": "b:8050"})
    assert yarn.rm_address(str(conf)) == "a:8032, b:8050"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pyspark_jars() -> str | None:
    try:
        import pyspark
    except ImportError:
        return None
    jars = os.path.join(os.path.dirname(pyspark.__file__), "jars")
    return os.path.join(jars, "*") if any(n.startswith("hadoop-client") for n in os.listdir(jars)) else None


@pytest.mark.slow
@pytest.mark.parametrize("bounded_by", ["yarn-site.xml", "STRAM_YARN_CONNECT_WAIT_MS"])
def test_submit_without_resourcemanager_fails_fast(tmp_path, bounded_by):
    """skein's real Java driver starts on PySpark's Hadoop jars; no ResourceManager answers."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java on this machine: skein's driver is a Java process")
    jars = pyspark_jars()
    if jars is None:
        pytest.skip("pyspark with Hadoop client jars (pyspark/jars/hadoop-client-*.jar) is not installed")
    port = closed_port()
    conf = tmp_path / "hadoop-conf"
    conf.mkdir()
    props: dict[str, Any] = {"yarn.resourcemanager.address": f"127.0.0.1:{port}", "fs.defaultFS": "file:///"}
    env = dict(os.environ, PATH=f"{SHIM}{os.pathsep}{os.environ['PATH']}", HADOOP_CONF_DIR=str(conf),
               STRAM_TEST_HADOOP_JARS=jars, SKEIN_CONFIG=str(tmp_path / "skein"),
               STRAM_HOME=str(tmp_path / "home"), STRAM_YARN_APPS_DIR=f"file://{tmp_path}/apps")
    env.pop("YARN_CONF_DIR", None)
    if bounded_by == "yarn-site.xml":
        props.update({"yarn.resourcemanager.connect.max-wait.ms": 2000,
                      "yarn.resourcemanager.connect.retry-interval.ms": 500,
                      "ipc.client.connect.max.retries": 0, "ipc.client.connect.retry.interval": 100})
        env.pop("STRAM_YARN_CONNECT_WAIT_MS", None)
    else:  # the cluster's configuration says nothing: stram's overlay bounds the wait
        env["STRAM_YARN_CONNECT_WAIT_MS"] = "3000"
    write_site(conf / "yarn-site.xml", props)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "stram.client.cli", "launch", "--yarn", str(WORDCOUNT),
                           "-D", "operators.reader.path=hdfs:///in.txt", "-D", "operators.out.path=hdfs:///out",
                           "--detach"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    elapsed = time.monotonic() - started
    if "exited before it was ready" in proc.stderr:
        pytest.skip(f"skein's Java driver does not start here: {proc.stderr.strip()}")
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: no ResourceManager answers at 127.0.0.1:{port} (yarn.resourcemanager.address "
                           f"in {conf}/yarn-site.xml) while submitting wordcount to YARN queue 'default'"), proc.stderr
    assert "Connection refused" in last
    assert "Traceback" not in proc.stderr
    assert elapsed < 60, f"took {elapsed:.1f}s"
    # the driver really ran: skein wrote its credentials into the private SKEIN_CONFIG
    assert (tmp_path / "skein" / "skein.crt").exists()


# ====================================================================== list, kill, admin URL, follow

def report(app_id: str = "application_1_0001", state: str = "RUNNING", final: str = "UNDEFINED",
           tags: tuple[str, ...] = ("stram",), tracking: str = "http://rm:8088/proxy/application_1_0001/",
           name: str = "wordcount", progress: float = 0.1, diagnostics: str = "") -> Any:
    usage = skein.model.ResourceUsageReport(0, 0, 1, skein.Resources(1024, 1), skein.Resources(0, 0),
                                            skein.Resources(1024, 1))
    return skein.model.ApplicationReport(
        app_id, name, "alice", "default", set(tags), "node1", 4321, tracking, state, final, progress, usage,
        diagnostics, datetime.datetime(2024, 5, 1, 12, 0), None)


class FakeClient:
    """The few ``skein.Client`` calls stram makes, answering with skein's own report objects."""

    def __init__(self, reports: list[Any]) -> None:
        self.reports = reports
        self.killed: list[str] = []
        self.sequence: list[Any] = []

    def get_applications(self, states=None):
        return list(self.reports)

    def application_report(self, app_id):
        if self.sequence:
            return self.sequence.pop(0) if len(self.sequence) > 1 else self.sequence[0]
        return next(r for r in self.reports if r.id == app_id)

    def kill_application(self, app_id, user=""):
        if app_id == "application_nope":
            raise skein.exceptions.DriverError("Application with id 'application_nope' doesn't exist in RM.")
        self.killed.append(app_id)


def test_list_kill_and_admin_url():
    client = FakeClient([report("application_1_0001"), report("application_1_0002", tags=("other",)),
                         report("application_1_0003", state="FINISHED", final="FAILED", diagnostics="boom")])
    rows = yarn.list_apps(client)
    assert [r["id"] for r in rows] == ["application_1_0003", "application_1_0001"]
    assert rows[0]["state"] == "FAILED" and rows[0]["yarn_state"] == "FINISHED"
    assert rows[1]["state"] == "RUNNING" and rows[1]["started_millis"] > 0
    assert json.dumps(rows)  # plain data for --json
    yarn.kill_app("application_1_0001", client)
    assert client.killed == ["application_1_0001"]
    with pytest.raises(StramError, match="killing application_nope failed: Application with id"):
        yarn.kill_app("application_nope", client)
    assert yarn.admin_url_for("application_1_0001", client) == \
        "http://rm:8088/proxy/application_1_0001/pages/stram"
    with pytest.raises(StramError, match="application application_1_0003 is FAILED; its master is not running"):
        yarn.admin_url_for("application_1_0003", client)


@pytest.mark.parametrize("final, code", [("SUCCEEDED", 0), ("FAILED", 1), ("KILLED", 1)])
def test_follow_until_the_end(capsys, final, code):
    client = FakeClient([])
    client.sequence = [report(state="ACCEPTED", tracking=""), report(state="RUNNING", progress=0.5),
                       report(state="FINISHED", final=final, diagnostics="why")]
    assert yarn.follow(client, "application_1_0001", interval=0.01) == code
    err = capsys.readouterr().err
    assert "ACCEPTED" in err and "RUNNING progress=50%" in err
    assert err.strip().splitlines()[-1] == f"application_1_0001 {final}" + (": why" if code else "")


class _Recorder(http.server.BaseHTTPRequestHandler):
    """GET/POST/DELETE recorder; as the YARN proxy (``proxy = True``) it refuses all but GET and PUT."""

    proxy = False
    seen: list = []

    def _answer(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        type(self).seen.append((method, self.path, body))
        if self.proxy and method not in ("GET", "PUT"):
            self.send_response(405)
            self.end_headers()
            return
        data = json.dumps({"method": method, "path": self.path, "via": "proxy" if self.proxy else "direct"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802
        self._answer("GET")

    def do_POST(self):  # noqa: N802
        self._answer("POST")

    def do_DELETE(self):  # noqa: N802
        self._answer("DELETE")

    def log_message(self, *args):  # quiet
        pass


@pytest.fixture
def proxy_and_master():
    """Two HTTP servers on 127.0.0.1: a stand-in YARN web proxy and a master's admin server."""
    servers = []
    for proxy in (True, False):
        handler = type("Handler", (_Recorder,), {"proxy": proxy, "seen": []})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
    yield tuple(f"http://127.0.0.1:{s.server_port}" for s in servers), [s.RequestHandlerClass for s in servers]
    for s in servers:
        s.shutdown()


def test_admin_request_routes(proxy_and_master):
    (proxy, master), (proxy_log, master_log) = proxy_and_master
    client = FakeClient([report(tracking=f"{proxy}/proxy/application_1_0001/")])
    pages = {"stram": skein.ui.ProxiedPage("stram", master, "stram", f"{proxy}/", "/pages")}
    client.connect = lambda app_id, wait=True, security=None: types.SimpleNamespace(
        ui=types.SimpleNamespace(get_pages=lambda: pages))
    # GET through the proxy, at the page the master registered
    assert yarn.admin_request("application_1_0001", client, "info") == {
        "method": "GET", "path": "/proxy/application_1_0001/pages/stram/ws/v2/stram/info", "via": "proxy"}
    # POST straight to the master (YARN's proxy forwards only GET and PUT)
    assert yarn.admin_request("application_1_0001", client, "shutdown", "POST")["via"] == "direct"
    assert master_log.seen[-1] == ("POST", "/ws/v2/stram/shutdown", b"{}")
    # no direct route: the proxy's 405 becomes a clear error
    pages.clear()
    with pytest.raises(StramError, match="the YARN web proxy does not forward DELETE"):
        yarn.admin_request("application_1_0001", client, "containers/c1", "DELETE")


def test_follow_duration_shuts_down_gracefully(proxy_and_master, capsys):
    (proxy, master), (_, master_log) = proxy_and_master
    client = FakeClient([])
    running = report(state="RUNNING", tracking=f"{proxy}/proxy/application_1_0001/")
    client.sequence = [running, running, running, report(state="FINISHED", final="SUCCEEDED")]
    client.connect = lambda app_id, wait=True, security=None: types.SimpleNamespace(ui=types.SimpleNamespace(
        get_pages=lambda: {"stram": skein.ui.ProxiedPage("stram", master, "stram", f"{proxy}/", "/pages")}))
    assert yarn.follow(client, "application_1_0001", duration=0.0, interval=0.01) == 0
    assert ("POST", "/ws/v2/stram/shutdown", b"{}") in master_log.seen
    assert client.killed == []
    assert "--duration 0s reached: shutting application_1_0001 down" in capsys.readouterr().err


# ====================================================================== the launcher, unit by unit

class RecordingClient:
    """Records the launcher's calls; containers end when the test says so."""

    def __init__(self, fail_add: bool = False) -> None:
        self.added: list[tuple[str, dict]] = []
        self.killed: list[str] = []
        self.ended: dict[str, tuple[str, str]] = {}
        self.shutdowns: list[tuple[str, str]] = []
        self.progress: list[float] = []
        self.fail_add = fail_add
        self.ui = types.SimpleNamespace(add_page=self.add_page)
        self.pages: list[tuple] = []

    def add_page(self, route, target, link_name=None):
        if target == "http://broken":
            raise skein.exceptions.ApplicationError("proxy route already exists")
        self.pages.append((route, target, link_name))
        return types.SimpleNamespace(address=f"http://rm/proxy/app/pages/{route}")

    def get_specification(self):
        return skein.ApplicationSpec(services={
            "container": skein.Service(resources=skein.Resources(1024, 1), script="x", instances=0),
            "container-4096mb-2vc": skein.Service(resources=skein.Resources(4096, 2), script="x", instances=0),
            "other": skein.Service(resources=skein.Resources(64, 1), script="x")})

    def add_container(self, service, env=None):
        if self.fail_add:
            raise skein.exceptions.ApplicationError("queue full")
        n = len(self.added)
        self.added.append((service, env))
        return skein.model.Container(service, n, "REQUESTED", "", "", None, None, "")

    def kill_container(self, id):
        self.killed.append(id)
        self.ended[id] = ("KILLED", "Container killed on request. Exit code is 137")

    def get_containers(self, services=None, states=None):
        out = []
        for n, (service, _) in enumerate(self.added):
            cid = f"{service}_{n}"
            state, message = self.ended.get(cid, ("RUNNING", ""))
            if (states is None or state in states) and (services is None or service in services):
                out.append(skein.model.Container(service, n, state, f"container_1_0001_01_{n:06d}", "n:8042",
                                           None, None, message))
        return out

    def set_progress(self, progress):
        self.progress.append(progress)

    def shutdown(self, status="SUCCEEDED", diagnostics=None):
        self.shutdowns.append((status, diagnostics))


def request(cid: str, memory: int = 1024, vcores: int = 1) -> ContainerRequest:
    return ContainerRequest(cid, memory, vcores, (), {"STRAM_CONTAINER_ID": cid, "STRAM_TOKEN": "t"})


def test_launcher_maps_containers_and_exit_codes():
    client = RecordingClient()
    launcher = yarnlauncher.YarnLauncher(client)
    assert launcher.services == {"container": (1024, 1), "container-4096mb-2vc": (4096, 2)}
    launcher.launch(request("c1"))
    launcher.launch(request("c2", memory=3000))
    launcher.launch(request("c3"))
    launcher.launch(request("c4", memory=8192, vcores=8))  # fits nowhere: the largest, with a warning
    assert [s for s, _ in client.added] == ["container", "container-4096mb-2vc", "container",
                                            "container-4096mb-2vc"]
    assert client.added[0][1] == {"STRAM_CONTAINER_ID": "c1", "STRAM_TOKEN": "t"}
    assert launcher.poll() == []
    client.ended["container_0"] = ("SUCCEEDED", "")
    client.ended["container-4096mb-2vc_1"] = ("FAILED", "Exception from container-launch.\nExit code: 3\n")
    launcher.kill("c3")
    assert client.killed == ["container_2"]
    assert sorted(launcher.poll()) == [("c1", 0), ("c2", 3), ("c3", 137)]
    assert launcher.poll() == []  # reported once
    launcher.kill("c1")  # already ended: nothing to kill
    assert client.killed == ["container_2"]
    launcher.stop_all(grace=0.5)
    assert client.killed == ["container_2", "container-4096mb-2vc_3"]
    assert launcher.poll() == []
    launcher.set_progress(1.7)
    assert client.progress == [1.0]


def test_launcher_failed_request_is_reported_as_ended():
    launcher = yarnlauncher.YarnLauncher(RecordingClient(fail_add=True))
    launcher.launch(request("c1"))
    assert launcher.poll() == [("c1", None)]
    assert launcher.poll() == []


def test_launcher_passes_resources_where_the_client_takes_them():
    calls = []

    class NewerClient(RecordingClient):
        def add_container(self, service, env=None, resources=None):
            calls.append(resources)
            return super().add_container(service, env)

    yarnlauncher.YarnLauncher(NewerClient(), {"container": (1024, 1)}).launch(request("c1", memory=2048, vcores=2))
    assert calls == [skein.Resources(2048, 2)]


def test_launcher_finish_ui_and_from_current(monkeypatch):
    client = RecordingClient()
    launcher = yarnlauncher.YarnLauncher(client)
    assert launcher.register_ui("http://node1:5000") == "http://rm/proxy/app/pages/stram"
    assert client.pages == [("stram", "http://node1:5000", "stram")]
    with pytest.warns(RuntimeWarning, match="could not add the stram admin page"):
        assert launcher.register_ui("http://broken") is None
    for state, status in (("SUCCEEDED", "SUCCEEDED"), ("FAILED", "FAILED"), ("KILLED", "KILLED"),
                          ("RUNNING", "FAILED")):
        client.shutdowns.clear()
        launcher = yarnlauncher.YarnLauncher(client)
        launcher.finish(state, "the diagnostics")
        assert client.shutdowns == [(status, "the diagnostics")]
    monkeypatch.delenv("SKEIN_APPLICATION_ID", raising=False)
    with pytest.raises(StramError, match="runs inside the Skein master container"):
        yarnlauncher.YarnLauncher.from_current()


def test_current_app_id():
    assert yarnnode.current_app_id({"SKEIN_APPLICATION_ID": "application_17_0042"}) == "application_17_0042"
    assert yarnnode.current_app_id({"CONTAINER_ID": "container_1526134340424_0012_01_000001"}) == \
        "application_1526134340424_0012"
    assert yarnnode.current_app_id({"CONTAINER_ID": "container_e17_1410901177871_0001_02_000005"}) == \
        "application_1410901177871_0001"
    assert yarnnode.current_app_id({"STRAM_APP_ID": "a", "SKEIN_APPLICATION_ID": "b"}) == "a"
    assert yarnnode.current_app_id({}) is None


# ====================================================================== HDFS prerequisites

def fake_hadoop_node(tmp_path: pathlib.Path) -> dict[str, str]:
    """A JAVA_HOME, libhdfs and a globbed CLASSPATH, as files where check_hdfs looks."""
    jdk = tmp_path / "jdk"
    (jdk / "lib" / "server").mkdir(parents=True)
    (jdk / "lib" / "server" / "libjvm.so").write_bytes(b"")
    native = tmp_path / "hadoop" / "lib" / "native"
    native.mkdir(parents=True)
    (native / "libhdfs.so").write_bytes(b"")
    conf = tmp_path / "hadoop" / "etc" / "hadoop"
    conf.mkdir(parents=True)
    write_site(conf / "core-site.xml", {"fs.defaultFS": "hdfs://nn:8020"})
    jars = tmp_path / "hadoop" / "share"
    jars.mkdir()
    (jars / "hadoop-common-3.4.1.jar").write_bytes(b"")
    return {"JAVA_HOME": str(jdk), "HADOOP_HOME": str(tmp_path / "hadoop"),
            "CLASSPATH": f"{conf}:{jars / 'hadoop-common-3.4.1.jar'}"}


def test_check_hdfs(tmp_path):
    assert yarnnode.check_hdfs("file:///tmp/x", {}) == {}
    assert yarnnode.check_hdfs("/tmp/x", {}) == {}
    with pytest.raises(StramError) as err:
        yarnnode.check_hdfs("hdfs:///user/a/.stram/apps/x", {})
    text = str(err.value)
    assert text.startswith("hdfs:///user/a/.stram/apps/x is on HDFS, which stram reaches through pyarrow's "
                           "HadoopFileSystem (libhdfs), but on this node: JAVA_HOME is not set")
    assert "libhdfs.so was not found" in text and "export CLASSPATH=$(hadoop classpath --glob)" in text

    env = fake_hadoop_node(tmp_path)
    found = yarnnode.check_hdfs("hdfs:///user/a/.stram/apps/x", env)
    assert found["libhdfs"].endswith("hadoop/lib/native/libhdfs.so") and found["classpath_jars"] == "1"
    assert yarnnode.check_hdfs("hdfs://nn:8020/apps/x", dict(env, HADOOP_HOME="",
                                                        ARROW_LIBHDFS_DIR=str(tmp_path / "hadoop/lib/native")))

    wild = dict(env, CLASSPATH=f"{tmp_path}/hadoop/etc/hadoop:{tmp_path}/hadoop/share/*")
    with pytest.raises(StramError, match=r"only wildcard entries \(dir/\*\), which the JVM that libhdfs"):
        yarnnode.check_hdfs("hdfs:///x", wild)
    no_conf = dict(env, CLASSPATH=f"{tmp_path}/hadoop/share/hadoop-common-3.4.1.jar")
    with pytest.raises(StramError, match="names no NameNode, so fs.defaultFS comes from core-site.xml"):
        yarnnode.check_hdfs("hdfs:///x", no_conf)
    assert yarnnode.check_hdfs("hdfs://nn:8020/x", no_conf)  # a NameNode named: no core-site.xml needed
    with pytest.raises(StramError, match="has no lib/server/libjvm.so"):
        yarnnode.check_hdfs("hdfs://nn/x", dict(env, JAVA_HOME=str(tmp_path / "hadoop")))
    # the node-side command the container script runs
    assert yarnnode.main(["check-hdfs", "file:///tmp"]) == 0


def test_prepare_master_stages_the_spec_once(tmp_path, capsys):
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(AppSpec.from_file(WORDCOUNT).to_yaml())
    app_path = f"file://{tmp_path}/app"
    assert yarnnode.prepare_master(str(spec_file), app_path) is None
    assert (tmp_path / "app" / "spec.yaml").read_text() == spec_file.read_text()
    spec_file.write_text("changed")  # a second attempt keeps the spec its journal belongs to
    assert yarnnode.prepare_master(str(spec_file), app_path) is None
    assert (tmp_path / "app" / "spec.yaml").read_text() != "changed"
    (tmp_path / "app" / "status.json").write_text(json.dumps({"state": "RUNNING"}))
    assert yarnnode.prepare_master(str(spec_file), app_path) is None
    (tmp_path / "app" / "status.json").write_text(json.dumps({"state": "KILLED"}))
    assert yarnnode.prepare_master(str(spec_file), app_path) == "KILLED"
    (tmp_path / "app" / "status.json").write_text(json.dumps({"state": "FAILED", "diagnostics": "it broke"}))
    assert yarnnode.prepare_master(str(spec_file), app_path) == "FAILED: it broke"  # the next attempt says why
    (tmp_path / "app" / "status.json").write_text(json.dumps({"state": "KILLED"}))
    os.environ["STRAM_APP_PATH"] = app_path
    try:
        assert yarnnode.main(["prepare-master", str(spec_file)]) == yarnnode.ALREADY_ENDED
    finally:
        del os.environ["STRAM_APP_PATH"]
    assert "an earlier attempt already ended this application KILLED" in capsys.readouterr().err


# ====================================================================== the launcher end to end

class _StandInUI:
    def __init__(self) -> None:
        self.pages: dict[str, tuple[str, str | None]] = {}

    def add_page(self, route: str, target: str, link_name: str | None = None) -> Any:
        if route in self.pages:
            raise skein.exceptions.ApplicationError(f"route {route!r} already exists")
        self.pages[route] = (target, link_name)
        return skein.ui.ProxiedPage(route, target, link_name, "http://rm:8088/proxy/app/", "/pages")


class StandInApplicationClient:
    """In place of ``skein.ApplicationClient``: a one-machine YARN NodeManager.

    ``add_container`` does what Skein's application master and a NodeManager
    do for a new instance of a service: a fresh container directory, the
    service's files localized there (files copied, archives unpacked into a
    directory named by their destination), and the service's script run with
    bash in it, with the service's env, the env given to ``add_container``, and
    the variables Skein and YARN set (SKEIN_*, CONTAINER_ID, NM_HOST, LOG_DIRS).
    States and exit messages follow YARN's (killed: "Exit code is 137").
    """

    def __init__(self, aspec: Any, root: pathlib.Path, app_id: str) -> None:
        self.spec = aspec
        self.root = root
        self.app_id = app_id
        self.ui = _StandInUI()
        self.kv: dict[str, bytes] = {}  # Skein's key-value store
        self.progress: list[float] = []
        self.shutdowns: list[tuple[str, str | None]] = []
        self.instances: Counter = Counter()
        self.containers: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()

    def get_specification(self) -> Any:
        return self.spec

    def add_container(self, service: str, env: dict[str, str] | None = None) -> Any:
        svc = self.spec.services[service]
        with self.lock:
            n = self.instances[service]
            self.instances[service] += 1
        sid = f"{service}_{n}"
        cdir = self.root / sid
        (cdir / "logs").mkdir(parents=True)
        for dest, f in svc.files.items():
            source = f.source[len("file://"):]
            if str(f.type) == "ARCHIVE":
                shutil.unpack_archive(source, cdir / dest)
            else:
                shutil.copy(source, cdir / dest)
        full = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "STRAM_HOST")}
        full.update(svc.env)
        full.update(env or {})
        ts, seq = self.app_id.split("_")[1:]
        full.update(SKEIN_APPLICATION_ID=self.app_id, SKEIN_CONTAINER_ID=sid,
                    SKEIN_RESOURCE_MEMORY=str(svc.resources.memory), SKEIN_RESOURCE_VCORES=str(svc.resources.vcores),
                    CONTAINER_ID=f"container_{ts}_{seq}_01_{len(self.containers) + 2:06d}",
                    NM_HOST="127.0.0.1", LOG_DIRS=str(cdir / "logs"))
        (cdir / ".skein.sh").write_text(svc.script)
        with open(cdir / "logs" / f"{service}.log", "wb") as out:
            proc = subprocess.Popen(["bash", ".skein.sh"], cwd=cdir, env=full, stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        with self.lock:
            self.containers[sid] = {"service": service, "instance": n, "proc": proc, "killed": False,
                                    "dir": cdir, "yarn_id": full["CONTAINER_ID"],
                                    "start": datetime.datetime.now(), "env": env or {}}
        return self._container(sid)

    def _container(self, sid: str) -> Any:
        c = self.containers[sid]
        code = c["proc"].poll()
        if code is None:
            state, message, finish = "RUNNING", "", None
        else:
            finish = c.setdefault("finish", datetime.datetime.now())
            if c["killed"]:
                state, message = "KILLED", "Container killed on request. Exit code is 137"
            elif code == 0:
                state, message = "SUCCEEDED", ""
            else:
                state, message = "FAILED", f"Container exited with a non-zero exit code {code}. "
        return skein.model.Container(c["service"], c["instance"], state, c["yarn_id"], "127.0.0.1:8042",
                               c["start"], finish, message)

    def get_containers(self, services: Any = None, states: Any = None) -> list[Any]:
        states = set(states or ("WAITING", "REQUESTED", "RUNNING"))
        with self.lock:
            sids = list(self.containers)
        out = [self._container(s) for s in sids]
        return sorted((c for c in out if str(c.state) in states
                       and (services is None or c.service_name in services)),
                      key=lambda c: (c.service_name, c.instance))

    def kill_container(self, id: str) -> None:
        c = self.containers.get(id)
        if c is None:
            raise KeyError(f"no container {id!r}")
        if c["proc"].poll() is not None:
            raise ValueError(f"Container {id!r} has already completed")
        c["killed"] = True
        os.killpg(c["proc"].pid, signal.SIGKILL)
        c["proc"].wait()

    def set_progress(self, progress: float) -> None:
        self.progress.append(progress)

    def shutdown(self, status: str = "SUCCEEDED", diagnostics: str | None = None) -> None:
        self.shutdowns.append((status, diagnostics))
        self.close()

    def close(self) -> None:
        for sid, c in list(self.containers.items()):
            if c["proc"].poll() is None:
                c["killed"] = True
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(c["proc"].pid, signal.SIGKILL)
                c["proc"].wait()

    def logs(self) -> str:
        return "\n".join(f"--- {sid}\n" + (c["dir"] / "logs" / f"{c['service']}.log").read_text(errors="replace")[-3000:]
                         for sid, c in self.containers.items())


def run_on_standin(tmp_path: pathlib.Path, overrides: list[str], during=None, timeout: float = 180.0):
    """Run a spec with the real AppMaster + YarnLauncher on the stand-in; (master, stand-in, aspec)."""
    from stram.master.process.master import AppMaster

    spec = AppSpec.from_file(WORDCOUNT, overrides=overrides)
    app_id = "application_1700000000000_0001"
    app_path = f"file://{tmp_path}/app"
    aspec = roundtrip(yarn.application_spec(spec, str(WORDCOUNT), python_env=sys.prefix, app_path=app_path,
                                            staging_dir=str(tmp_path / "staging")))
    # the master script's first step, as a process, with the env the master gets
    env = dict(os.environ, **aspec.master.env)
    staged = subprocess.run([sys.executable, "-m", "stram.master.launch.yarnnode", "prepare-master",
                             aspec.master.files["spec.yaml"].source[len("file://"):]],
                            env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert staged.returncode == 0, staged.stderr
    assert AppSpec.from_yaml((tmp_path / "app" / "spec.yaml").read_text()) == spec

    standin = StandInApplicationClient(aspec, tmp_path / "nm", app_id)
    launcher = yarnlauncher.YarnLauncher(standin)
    master = AppMaster(spec, app_id, app_path, token_of(aspec.master), launcher, host="127.0.0.1")
    result: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: result.setdefault("state", master.run()), daemon=True)
    try:
        thread.start()
        if during is not None:
            during(master, standin)
        thread.join(timeout)
        assert not thread.is_alive(), "the master did not finish in time\n" + standin.logs()
    finally:
        if thread.is_alive():
            master.request_kill()
            thread.join(30)
        standin.close()
    assert result.get("state") == "SUCCEEDED", standin.logs()
    return master, standin, aspec


@pytest.mark.slow
def test_yarn_launcher_runs_wordcount(tmp_path):
    out = tmp_path / "out"
    master, standin, aspec = run_on_standin(tmp_path, [f"operators.reader.path={WORDS}",
                                                       f"operators.out.path={out}"])
    truth = word_truth(WORDS)
    sums, maxima, _ = read_counts(out)
    assert sums == truth
    assert maxima == dict(truth)
    assert standin.shutdowns == [("SUCCEEDED", standin.shutdowns[0][1])]
    # TLS is on by default on YARN: Skein's proxy reaches a plain listener, the CLI the HTTPS address
    # published with the application's certificate
    assert standin.ui.pages == {"stram": (master.proxy_url, "stram")}
    assert master.admin_url.startswith("https://") and master.proxy_url.startswith("http://")
    from stram.client.adminhttp import ADMIN_KEY
    assert json.loads(standin.kv[ADMIN_KEY]) == {"url": master.admin_url,
                                                 "cert": master.tls_identity.cert_pem.decode()}
    # containers were instances of the "container" service, run by its script from localized files
    assert standin.containers and {c["service"] for c in standin.containers.values()} == {"container"}
    for c in standin.containers.values():
        assert (c["dir"] / "app" / "stram" / "agent" / "agent.py").is_file()
        assert set(c["env"]) >= {"STRAM_CONTAINER_ID", "STRAM_APP_PATH", "STRAM_APP_ID"}
        assert not {"STRAM_TOKEN", "STRAM_TOKEN_FILE"} & set(c["env"])
        # no container holds the application's token: each has a credential of its own
        assert not (c["dir"] / "stram.token").exists()
        assert not any(token_of(aspec.master) in f.read_text(errors="replace")
                       for f in c["dir"].glob("*") if f.is_file())
    assert all(str(c.state) == "SUCCEEDED" for c in standin.get_containers(states=["SUCCEEDED", "FAILED",
                                                                                 "KILLED", "RUNNING"]))
    # the agents announced the NodeManager's host (NM_HOST), as the script exports it
    assert all(r["buffer_server"].startswith("127.0.0.1:") for r in master.state.container_rows())
    # the service script's preamble puts the shipped stram first: rerun it up to the last line
    c = next(iter(standin.containers.values()))
    probe = aspec.services["container"].script.replace(
        "exec python -m stram.agent", 'python -c "import stram.agent.agent as a; print(a.__file__)"')
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(c["env"], NM_HOST="127.0.0.1")
    where = subprocess.run(["bash", "-c", probe], cwd=c["dir"], env=env, capture_output=True, text=True, timeout=60)
    assert where.returncode == 0, where.stderr
    assert where.stdout.strip() == str(c["dir"] / "app" / "stram" / "agent" / "agent.py")


@pytest.mark.slow
def test_yarn_launcher_recovers_a_killed_container(tmp_path):
    """kill-container through the admin API: YarnLauncher.kill, a KILLED poll, recovery, exact counts."""
    out = tmp_path / "out"
    killed: dict[str, Any] = {}

    def kill_one(master, standin):
        from stram.client.adminhttp import request_json
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if master.admin_url:  # HTTPS under the application's certificate (TLS: YARN's default)
                ca = master.tls_identity.cert_pem
                rows = request_json(master.admin_url, "operators", token=master.token, ca=ca)
                active = [r for r in rows["operators"] if r["state"] == "ACTIVE"]
                if len(active) == 4 and not master.finished.is_set():
                    victim = next(r["container"] for r in active if r["name"] == "count")
                    killed["id"] = request_json(master.admin_url, f"containers/{victim}", "DELETE",
                                                token=master.token, ca=ca)["killed"]
                    return
            time.sleep(0.2)

    master, standin, _ = run_on_standin(
        tmp_path, [f"operators.reader.path={MOBY}", "operators.reader.lines_per_window=400",
                   f"operators.out.path={out}"], during=kill_one)
    assert killed, "no container was killed: " + standin.logs()
    states = [str(c.state) for c in standin.get_containers(states=["KILLED"])]
    assert states == ["KILLED"]
    truth = word_truth(MOBY)
    sums, maxima, _ = read_counts(out)
    assert sums == truth
    assert maxima == dict(truth)
    assert len(standin.containers) > 3  # the killed container was replaced


def test_refused_submissions_are_one_clear_line():
    """The ResourceManager's refusals (the texts Hadoop 3.5 sends) become one line without a stack trace."""
    trace = "\n\tat org.apache.hadoop.ipc.Server$Handler.work(Server.java:3279)\n"
    cases = {
        "Failed to submit application, exception:\nInvalid resource request! Cannot allocate containers as "
        "requested resource is greater than maximum allowed allocation. Requested resource type=[memory-mb], "
        "Requested resource=<memory:100000, vCores:1>, maximum allowed allocation=<memory:8192, vCores:8>, "
        "please note ..." + trace: ("<memory:100000, vCores:1>", "<memory:8192, vCores:8>", "MASTER_MEMORY_MB"),
        "Failed to submit application, exception:\nFailed to submit application_1_0003 to YARN : Application "
        "application_1_0003 submitted by user root to unknown queue: nope": ("'nope' does not exist", "QUEUE"),
        "Failed to submit application, exception:\nFailed to submit application_1_0001 to YARN : "
        "org.apache.hadoop.security.AccessControlException: Queue root.stopped is STOPPED. Cannot accept "
        "submission of application: application_1_0001": ("root.stopped is STOPPED", "QUEUE"),
        "Failed to submit application, exception:\nFailed to submit application_1_0002 to YARN : "
        "org.apache.hadoop.security.AccessControlException: Queue root.full already has 0 applications, cannot "
        "accept submission of application: application_1_0002": ("root.full already has 0 applications",),
    }
    for text, words in cases.items():
        err = yarn.translate(skein.exceptions.DriverError(text), "submitting x to YARN queue 'q'")
        assert isinstance(err, UserError), (text, err)
        message = str(err)
        assert "\n" not in message and "at org.apache" not in message, message
        assert message.startswith("YARN refused submitting x to YARN queue 'q': "), message
        for word in words:
            assert word in message, (word, message)


def test_with_tls_the_direct_route_is_the_published_https_address_and_certificate():
    from stram.client.adminhttp import ADMIN_KEY
    page = skein.ui.ProxiedPage("stram", "http://node:1", "stram", "http://rm/", "/pages")
    kv = {ADMIN_KEY: json.dumps({"url": "https://node:2", "cert": "PEM"}).encode()}
    app = types.SimpleNamespace(kv=kv, ui=types.SimpleNamespace(get_pages=lambda: {"stram": page}))
    client = types.SimpleNamespace(connect=lambda app_id, wait=True: app)
    assert yarn.client.direct_admin("application_1_0001", client) == ("https://node:2", b"PEM")
    kv.clear()  # TLS off (or an older master): the page's plain target, no certificate
    assert yarn.client.direct_admin("application_1_0001", client) == ("http://node:1", None)
