"""How the master ends an application: asked to, killed, or with containers still ending operators.

Functions over the master's :class:`~stram.master.core.books.Books`. A graceful
end (:func:`handle_shutdown_request`) asks every input operator to end its
stream; a kill (:func:`handle_kill_app`) stops every container at once.

Once the application ends, every container gets ``shutdown`` in its heartbeat
response (with the final committed window) and undeploys its operators. An
output's teardown makes its last committed windows final: KafkaOutput, for
one, publishes them once its broker answers again. Meanwhile the agent
heartbeats ``ending`` (the operators still ending), and the master waits for
it as long as it does, up to END_TIMEOUT_SECS
(:meth:`stram.master.process.master.AppMaster._wait_for_containers`), instead of stopping it
after a fixed grace.

A reader who sees SUCCEEDED must find the whole output, so a SUCCEEDED
application ends FAILED, saying why, when an operator's teardown fails after
the end (the agent reports it before it exits) or when a container had to be
stopped while it was still ending operators.
"""

from __future__ import annotations

from stram.master.core import convert
from stram.master.core.books import Books
from stram.master.core.events import ContainersStopped, KillApp, ShutdownRequest
from stram.master.core.instructions import Instruction, KillContainer, Reply
from stram.master.core.lifecycle import finish, last_line, maybe_finish, note
from stram.master.core.plan import ALIVE, ContainerState, PTContainer

__all__ = ["ending_heartbeat", "fail_at_end", "error_after_end", "handle_containers_stopped",
           "handle_shutdown_request", "handle_kill_app"]


def handle_shutdown_request(books: Books, ev: ShutdownRequest) -> list[Instruction]:
    """Graceful end: ask every input operator to end its stream."""
    now = ev.now
    books.shutdown_requested = True
    for op in books.plan.operators.values():
        if op.kind == "INPUT" and not op.inputs and op.container:  # sources, not readers of streams
            books.node_requests[op.container].append((op.id, convert.SHUTDOWN_OPERATOR))
    note(books, now, "shutdown", "shutdown requested: ending the input operators' streams")
    return []


def handle_kill_app(books: Books, ev: KillApp) -> list[Instruction]:
    """Kill the application: every container stopped, state KILLED."""
    finish(books, "KILLED", "killed by request", ev.now)
    return [KillContainer(c.id, "application killed") for c in books.plan.containers.values()
            if c.state in ALIVE] + maybe_finish(books, force=True)


def ending_heartbeat(books: Books, container: PTContainer, ending: list[str], now: int) -> list[Instruction]:
    """A heartbeat of a container that undeploys its operators: alive, still ending ``ending``."""
    if ending != container.ending:
        note(books, now, "ending", f"{container.id} still ends {', '.join(ending)}")
    container.ending = ending
    container.last_heartbeat_millis = now
    return [Reply(convert.heartbeat_response(0, books.committed, shutdown=True))]


def fail_at_end(books: Books, diagnostics: str, now: int) -> None:
    """A SUCCEEDED application whose end went wrong before its final state was sent: FAILED."""
    if books.state != "SUCCEEDED" or books.finish_sent:
        return
    books.state = "FAILED"
    books.diagnostics = diagnostics
    books.finished_millis = now
    note(books, now, "finish", f"application FAILED: {diagnostics}")


def error_after_end(books: Books, container_id: str, operators: list[int], msg: str, now: int) -> None:
    """An operator's teardown (or last ``committed``) failed after the application ended."""
    labels = {r["id"]: r["label"] for r in books.removed}
    labels.update((op.id, op.label) for op in books.plan.operators.values())
    named = ", ".join(labels.get(o, str(o)) for o in operators) or "an operator"
    fail_at_end(books, f"the application ended, but {named} in {container_id} "
                       f"failed while ending, so its output may be incomplete: {last_line(msg)}", now)


def handle_containers_stopped(books: Books, ev: ContainersStopped) -> list[Instruction]:
    """After the end: the launcher stopped what was left; Finish (once)."""
    still = [c for c in (books.plan.containers.get(cid) for cid in ev.stopped) if c is not None and c.ending]
    if still:
        fail_at_end(books, f"the application ended, but container {still[0].id} was stopped while still "
                           f"ending {', '.join(still[0].ending)} (END_TIMEOUT_SECS="
                           f"{books.attr('END_TIMEOUT_SECS')}): its last committed windows may not be final",
                    ev.now)
    for container in books.plan.containers.values():
        if container.state in ALIVE:
            container.state = ContainerState.RELEASED
    return maybe_finish(books, force=True)
