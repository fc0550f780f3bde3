"""Names the YARN client and the master inside YARN both use: Skein services, keys and tags.

The client writes them into the ``skein.ApplicationSpec`` it submits; the master's
launcher and the client's admin calls read them back. One place, so neither side
imports the other.
"""

__all__ = ["CONTAINER_SERVICE", "ADMIN_KEY"]

#: The Skein service whose instances are stram containers (extra shapes: ``container-<MB>mb-<N>vc``).
CONTAINER_SERVICE = "container"
#: The key, in a YARN application's Skein key-value store, of the admin API's HTTPS address
#: and certificate (JSON ``{"url", "cert"}``), published when TLS is on.
ADMIN_KEY = "stram.admin"
