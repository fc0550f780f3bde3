"""./scripts/kafka's pure parts (the broker itself is exercised by the Kafka tests)."""

from __future__ import annotations

import base64
import importlib.machinery
import importlib.util
from conftest import ROOT

SCRIPT = ROOT / "scripts" / "kafka"


def load_script():  # noqa: ANN201
    loader = importlib.machinery.SourceFileLoader("stram_kafka_script", str(SCRIPT))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_a_cluster_id_never_starts_with_a_dash():
    """The storage tool took an id starting with "-" for an option: one broker start in 64 failed
    ("argument --cluster-id/-t: expected one argument")."""
    script = load_script()
    ids = [script._cluster_id() for _ in range(5000)]  # about 78 would start with "-" if drawn plainly
    assert not [i for i in ids if i.startswith("-")]
    assert all(len(i) == 22 and len(base64.urlsafe_b64decode(i + "==")) == 16 for i in ids)
    assert len(set(ids)) == len(ids)
