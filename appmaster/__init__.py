"""The application master (``python -m stram.master``): plans the DAG, tracks containers, decides recovery.

Rooms, by job:

``core``
    Sans-I/O decisions: events in, instructions out. :class:`~stram.master.core.state.MasterState`
    (heartbeats, deploys, the committed window, recovery, removal, scaling) over the
    physical plan, and the reports the admin surface shows.
``journal``
    What a new master attempt resumes from: the document, its append-only log, compaction.
``umbilical``
    The gRPC service containers call (token gate, batched dispatch) and the front process.
``admin``
    The admin REST API, its auth and bodies, the web console and Prometheus metrics.
``process``
    The running master: :class:`~stram.master.process.master.AppMaster` wires the rooms,
    the dispatcher is the one door into the state; address files, credentials,
    housekeeping, the stats listener and the local supervisor.
``launch``
    Starting containers: local processes, or Skein service instances on YARN, and the
    checks that run on YARN nodes before stram does.
``spec``
    The application spec: YAML in, a validated logical DAG out.

The master imports :mod:`stram.common` and :mod:`stram.wire`, never the agent.
"""
