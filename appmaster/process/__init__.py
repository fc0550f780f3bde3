"""The running master process.

``master``
    :class:`~.master.AppMaster`: wires the core, the umbilical, the admin server, the
    journal and a launcher, and runs the master's loop.
``dispatcher``
    The one door into the state: lock, handle, journal, carry out.
``addressfiles``, ``credentials``
    The files others find the master by (``heartbeatUri``, ``admin.json``); containers' credentials.
``housekeeping``, ``listener``
    Obsolete checkpoints and GC tuning off the heartbeat path; the DAG's STATS_LISTENER.
``supervise``
    A local application's supervisor: restarts master attempts as YARN would.
``signals``
    SIGTERM/SIGINT: a kill while the application runs, the master's stop once it ended.
"""
