"""The master's pure core: every decision, no I/O.

:class:`~.state.MasterState` takes :mod:`~.events` and returns :mod:`~.instructions`
for the process to carry out (launch, kill, write, reply). It is the master's
books (:mod:`~.books`: every field, typed) and its event table; each part is a
module of functions over the books, called by name, never inherited:

``books``, ``state``
    The fields of one application's state; MasterState: the books, the event table, the queries.
``lifecycle``
    What every part shares: the event log, launching a container, finishing the application.
``heartbeat``, ``deploy``
    A container's heartbeat and its response; init contexts, deploy infos and the interval asked for.
``recovery``, ``diagnose``, ``removal``, ``ending``
    Lost containers, failed operators and the clock; stack traces and the blocked-operator
    diagnostic; safe removal of operators that ended; the end of the application.
``repartition``, ``scaling``
    Live repartitioning: the state's two handlers, and the pure decision and new plan.
``plan``, ``changes``
    The physical plan (operators, containers, streams) and the trackers of what changed in it, its own.
``committed``, ``rules``
    The committed window, kept up to date incrementally; recovery checkpoints and backoff.
``history``, ``reports``, ``pacing``
    Operators' windows and counters; what the admin surface and CLI show; heartbeat pacing under load.
``statedoc``, ``convert``
    The state's journal document and its version; the one edge to the wire (protobuf messages).
"""
