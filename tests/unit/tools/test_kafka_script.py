"""./scripts/kafka's pure parts (the broker itself is exercised by the Kafka tests)."""

from __future__ import annotations

import base64

from scripts.lib import kafka


def test_a_cluster_id_never_starts_with_a_dash():
    """The storage tool took an id starting with "-" for an option: one broker start in 64 failed
    ("argument --cluster-id/-t: expected one argument")."""
    ids = [kafka._cluster_id() for _ in range(5000)]  # about 78 would start with "-" if drawn plainly
    assert not [i for i in ids if i.startswith("-")]
    assert all(len(i) == 22 and len(base64.urlsafe_b64decode(i + "==")) == 16 for i in ids)
    assert len(set(ids)) == len(ids)
