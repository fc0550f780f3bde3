"""The master's admin surface: what users, the CLI and browsers see of a running application.

``rest``
    The admin API under ``/ws/v2/stram/`` (Apex's paths), on Flask.
``auth``, ``bodies``
    Who may call it (bearer token, SPNEGO on a Kerberos cluster), and request bodies checked by schema.
``server``
    The HTTP(S) server (Hypercorn in a thread).
``console``, ``static``
    The web console: a static page drawn from the admin API.
``metrics``, ``pagejson``
    Prometheus metrics; the operators page written as JSON without a dict per row.
"""
