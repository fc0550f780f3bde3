"""The master's pure core: every decision, no I/O.

:class:`~.state.MasterState` takes :mod:`~.events` and returns :mod:`~.instructions`
for the process to carry out (launch, kill, write, reply). Around it:

``plan``, ``changes``
    The physical plan (operators, containers, streams) and what changed in it.
``committed``, ``rules``
    The committed window, kept up to date incrementally; recovery checkpoints and backoff.
``recovery``, ``ending``, ``diagnose``, ``deploy``
    Lost containers and failed operators; operators ending; stack traces and the
    blocked-operator diagnostic; init contexts and deploy infos.
``scaling``, ``pacing``
    Live repartitioning; heartbeat pacing under load.
``reports``
    What the admin surface and CLI show (info, operator and container rows).
"""
