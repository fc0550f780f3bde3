"""stram on a Kerberized cluster (issue 14, item 7): a MiniKdc, and HDFS and YARN in secure mode.

``./scripts/minicluster start --secure`` runs the KDC in the cluster's JVM and
gives the user a principal and keytab. Without a ticket HDFS refuses the
user; ``stram launch --yarn`` with the principal and keytab
(``STRAM_YARN_PRINCIPAL``/``STRAM_YARN_KEYTAB``, as the exports set them)
logs skein's driver in from the keytab, takes an HDFS delegation token, and
the word count's master and containers (which log in from the shipped keytab
too) read and write HDFS: the output equals a count made here.
"""

from __future__ import annotations

import pathlib
import subprocess

import pytest

from conftest import read_counts, word_truth
from hadoop import as_user_of, launch_following, start_cluster, stop_cluster

pytestmark = pytest.mark.slow

WORDS = pathlib.Path(__file__).resolve().parent.parent / "specs" / "data" / "words.txt"


@pytest.fixture(scope="module")
def secure_cluster(tmp_path_factory):
    cluster, env = start_cluster(tmp_path_factory.mktemp("securecluster"), "--secure")
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
