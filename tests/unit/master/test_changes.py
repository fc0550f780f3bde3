"""Change tracking (appmaster/core/changes.py): a plan being built marks nothing, other threads still do.

A new plan (planned from a spec, or read back from a journal) is read whole by
its readers, so its construction is not tracked; a change made meanwhile in
another thread (another master in the same process) must still be. Each plan
owns its trackers (``plan.changes``): another plan's changes never mark them.
"""

from __future__ import annotations

import copy
import threading

from stram.master.core import changes
from stram.master.core.plan import PhysicalPlan, PTContainer
from stram.master.journal import document as journal
from stram.master.spec import AppSpec

SPEC = """
name: wide
operators:
  src: {class: 'stram.operators.io:LineReader', partitions: 40, properties: {path: /dev/null}}
  out: {class: 'stram.operators.io:JsonLinesOutput', partitions: 40, properties: {path: /dev/null}}
streams:
  s: {from: src.output, to: [out.input]}
"""


def _marked(plan: PhysicalPlan, tracker: changes.Tracker) -> list[object]:
    mine = {id(o) for o in [*plan.operators.values(), *plan.containers.values()]}
    return [o for key, o in tracker.marks.items() if key in mine]


def test_a_plan_built_from_a_spec_or_a_journal_marks_nothing() -> None:
    plan = PhysicalPlan.from_spec(AppSpec.from_yaml(SPEC))
    assert len(plan.operators) == 80 and plan.containers
    assert not _marked(plan, plan.changes.journal) and not _marked(plan, plan.changes.committed)
    again = journal.plan_from_doc(journal.plan_to_doc(plan))
    assert journal.plan_to_doc(again) == journal.plan_to_doc(plan)
    assert not _marked(again, again.changes.journal)
    # once built, its changes are tracked as any
    op = next(iter(plan.operators.values()))
    op.checkpoints = [5]
    assert _marked(plan, plan.changes.journal) == [op] and _marked(plan, plan.changes.committed) == [op]
    plan.changes.journal.take(lambda o: o is op)
    plan.changes.committed.take(lambda o: o is op)


def test_another_thread_is_tracked_while_one_builds() -> None:
    plan = PhysicalPlan()
    other, built = plan.put_container(PTContainer(id="elsewhere")), plan.put_container(PTContainer(id="built"))
    tracker = plan.changes.journal
    tracker.take(lambda o: o is other or o is built)
    with changes.untracked():
        with changes.untracked():  # nested: still building
            built.memory_mb = 1
        built.host = "h"  # the inner one ended, the outer one goes on
        t = threading.Thread(target=setattr, args=(other, "host", "there"))
        t.start()
        t.join()
    assert id(other) in tracker.marks
    assert id(built) not in tracker.marks
    built.host = "after"
    assert id(built) in tracker.marks
    tracker.take(lambda o: o is other or o is built)


def test_each_plan_owns_its_trackers_and_a_copy_starts_afresh() -> None:
    plan = PhysicalPlan.from_spec(AppSpec.from_yaml(SPEC))
    other = PhysicalPlan.from_spec(AppSpec.from_yaml(SPEC))
    op, elsewhere = next(iter(plan.operators.values())), next(iter(other.operators.values()))
    elsewhere.checkpoints = [5]
    elsewhere.container = "container_000002"  # the other plan's shape changes, not this one's
    assert _marked(other, other.changes.journal) == [elsewhere] and other.changes.structure == 1
    assert not plan.changes.journal.marks and not plan.changes.committed.marks and plan.changes.structure == 0
    # a container is the journal's, not the committed window's
    container = next(iter(plan.containers.values()))
    container.host = "h"
    assert _marked(plan, plan.changes.journal) == [container] and not plan.changes.committed.marks
    # a copy (a repartitioning's new plan) is another plan: its changes mark its own trackers
    copied = copy.deepcopy(plan)
    assert copied.changes is not plan.changes
    copied.changes.journal.take(lambda o: True)
    twin = copied.operators[op.id]
    twin.checkpoints = [7]
    assert _marked(copied, copied.changes.journal) == [twin] and _marked(copied, copied.changes.committed) == [twin]
    assert _marked(plan, plan.changes.journal) == [container]
    # an object no plan holds marks nothing
    loose = PTContainer(id="loose")
    loose.host = "nowhere"
    assert all(id(loose) not in t.marks for p in (plan, other, copied) for t in (p.changes.journal, p.changes.committed))

