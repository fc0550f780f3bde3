"""stram on a Kerberized cluster (issue 14, item 7): a MiniKdc, and HDFS and YARN in secure mode.

``./scripts/minicluster start --secure`` runs the KDC in the cluster's JVM and
gives the user a principal and keytab. Without a ticket HDFS refuses the
user; ``stram launch --yarn`` with the principal and keytab
(``STRAM_YARN_PRINCIPAL``/``STRAM_YARN_KEYTAB``, as the exports set them)
logs skein's driver in from the keytab, takes an HDFS delegation token, and
the word count's master and containers (which log in from the shipped keytab
too) read and write HDFS: the output equals a count made here.

The cluster's delegation tokens live a minute (as if a week had passed): a
receiver application with its write-ahead log on HDFS runs past that, loses its
receiver's container after it, and still ends with every acknowledged line
exactly once. Its processes reach HDFS with tickets they renew from the keytab.
"""

from __future__ import annotations

import subprocess
import time

import pytest
from conftest import ROOT, read_counts, word_truth
from e2ekit import wait_until
from hadoop import as_user_of, collect_logs, launch_following, start_cluster, stop_cluster, stram

WORDS = ROOT / "specs" / "data" / "words.txt"
#: How long the cluster's delegation tokens live (HDFS's and YARN's; renewals cannot pass it).
TOKEN_LIFETIME = 60


@pytest.fixture(scope="module")
def secure_cluster(tmp_path_factory):
    cluster, env = start_cluster(tmp_path_factory.mktemp("securecluster"), "--secure",
                                 STRAM_MINICLUSTER_TOKEN_LIFETIME_MS=str(TOKEN_LIFETIME * 1000))
    try:
        yield cluster
    finally:
        stop_cluster(cluster, env)


def test_a_word_count_on_a_kerberized_cluster(secure_cluster, monkeypatch, tmp_path_factory, tmp_path):
    cluster = as_user_of(secure_cluster, monkeypatch, tmp_path_factory)
    assert cluster.exports["STRAM_YARN_PRINCIPAL"].endswith("@STRAM.LOCAL")
    # no ticket: HDFS refuses the user
    env = dict(cluster.env(), KRB5CCNAME=f"FILE:{tmp_path}/empty")
    no_ticket = subprocess.run([str(cluster.hadoop_home / "bin" / "hdfs"), "dfs", "-ls", "/"], env=env,
                               capture_output=True, text=True, timeout=120)
    assert no_ticket.returncode != 0 and "authenticate" in no_ticket.stderr, no_ticket.stderr[-2000:]
    # with the ticket ./scripts/minicluster start took: the user's files
    base = cluster.new_dir("kerberos")
    words = cluster.put(WORDS, f"{base}/words.txt")
    proc, app_id = launch_following("specs/wordcount.yaml", "-D", f"operators.reader.path={words}",
                                    "-D", f"operators.out.path={cluster.uri(base)}/out")
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-4000:]
    truth = word_truth(WORDS)
    sums, maxima, _ = read_counts(cluster.get(f"{base}/out", tmp_path / "out"))
    assert sums == truth and maxima == dict(truth)


def test_an_application_outlives_its_delegation_tokens(secure_cluster, monkeypatch, tmp_path_factory, tmp_path):
    from test_receivers_e2e import LineSource, check_socket_output
    from test_yarn_apps import (_kill_receiver, _launch_detached, _lines_out, _receiver_spec, _report_receiver_app,
                                _rx_container)

    cluster = as_user_of(secure_cluster, monkeypatch, tmp_path_factory)
    monkeypatch.setenv("STRAM_KINIT_INTERVAL", "15")  # the nodes' tickets: renewed from the keytab
    base = cluster.new_dir("renewal")
    source = LineSource(total=6000, rate=50)  # two minutes of lines: twice the tokens' lifetime
    spec = _receiver_spec(tmp_path, source.port, f"{cluster.uri(base)}/out")
    submitted = time.monotonic()
    app_id = _launch_detached(spec)
    try:
        # past the tokens' lifetime: the receiver's process is lost; the new container is
        # localized and reads the write-ahead log on HDFS after every token of the launch died
        wait_until(lambda: time.monotonic() - submitted > TOKEN_LIFETIME + 10 and source.acked > 100,
                   300, "lines acknowledged after the tokens' lifetime", interval=1)
        _kill_receiver(app_id, source, wait_until(lambda: _rx_container(app_id), 120, "the receiver's container",
                                                  interval=1))
        wait_until(lambda: source.acked == source.total, 300, "every line acknowledged", interval=1)
        assert stram("shutdown-app", app_id).returncode == 0
        done = stram("wait", app_id, "--timeout", "300")
        assert done.returncode == 0, done.stdout + done.stderr
    except BaseException:
        _report_receiver_app(cluster, app_id, source, tmp_path)
        raise
    finally:
        source.close()
    lasted = time.monotonic() - submitted
    # Skein's staging directory (with the keytab) is gone: the master deleted it with its ticket,
    # where Skein's own attempt with the launch's dead token fails
    user = cluster.exports["STRAM_YARN_PRINCIPAL"].split("@")[0]
    wait_until(lambda: app_id not in cluster.hdfs("-ls", f"/user/{user}/.skein", check=False), 90,
               f"/user/{user}/.skein/{app_id} deleted", interval=2)
    print(f"Kerberos renewal: the application ran {lasted:.0f}s on tokens that live {TOKEN_LIFETIME}s")
    assert lasted > 2 * TOKEN_LIFETIME
    assert source.connections >= 2
    check_socket_output(source, _lines_out(cluster.get(f"{base}/out", tmp_path / "out")))
    # the master and the containers renewed their tickets from the keytab while they ran
    logs = collect_logs(cluster, app_id, tmp_path / "logs")
    renewed = [p.parent.name for p in logs.rglob("*.log") if "renewed the ticket of" in p.read_text(errors="replace")]
    assert any(name.endswith("_000001") for name in renewed) and len(renewed) >= 3, renewed
