"""Change tracking (appmaster/core/changes.py): a plan being built marks nothing, other threads still do.

A new plan (planned from a spec, or read back from a journal) is read whole by
its readers, so its construction is not tracked; a change made meanwhile in
another thread (another master in the same process) must still be.
"""

from __future__ import annotations

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
    assert not _marked(plan, changes.JOURNAL) and not _marked(plan, changes.COMMITTED)
    again = journal.plan_from_doc(journal.plan_to_doc(plan))
    assert journal.plan_to_doc(again) == journal.plan_to_doc(plan)
    assert not _marked(again, changes.JOURNAL)
    # once built, its changes are tracked as any
    op = next(iter(plan.operators.values()))
    op.checkpoints = [5]
    assert _marked(plan, changes.JOURNAL) == [op] and _marked(plan, changes.COMMITTED) == [op]
    changes.JOURNAL.take(lambda o: o is op)
    changes.COMMITTED.take(lambda o: o is op)


def test_another_thread_is_tracked_while_one_builds() -> None:
    other, built = PTContainer(id="elsewhere"), PTContainer(id="built")
    changes.JOURNAL.take(lambda o: o is other or o is built)
    with changes.untracked():
        with changes.untracked():  # nested: still building
            built.memory_mb = 1
        built.host = "h"  # the inner one ended, the outer one goes on
        t = threading.Thread(target=setattr, args=(other, "host", "there"))
        t.start()
        t.join()
    assert id(other) in changes.JOURNAL.marks
    assert id(built) not in changes.JOURNAL.marks
    built.host = "after"
    assert id(built) in changes.JOURNAL.marks
    changes.JOURNAL.take(lambda o: o is other or o is built)

