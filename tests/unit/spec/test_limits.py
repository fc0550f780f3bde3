"""The size limits of a spec and planning that stays linear (issue 13, item 7).

Pure: specs are validated and planned in this process (module probes in a subprocess).
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest


from conftest import ROOT  # noqa: E402

from stram.master.core import scaling  # noqa: E402
from stram.master.core.plan import PhysicalPlan  # noqa: E402
from stram.master.core.rules import recovery_checkpoints  # noqa: E402
from stram.master.spec import AppSpec, SpecError  # noqa: E402
from stram.master.spec.limits import MAX_NAME_LENGTH, MAX_PARTITIONS  # noqa: E402


def spec_text(partitions: int = 2, app: str = "limits", op: str = "up", stream: str = "a") -> str:
    return f"""
name: {app}
operators:
  src: {{class: spec_fixture_ops:Source}}
  {op}: {{class: spec_fixture_ops:Upper, partitions: {partitions}}}
  out: {{class: spec_fixture_ops:Sink}}
streams:
  {stream}: {{from: src.output, to: [{op}.input]}}
  b: {{from: {op}.output, to: [out.input]}}
"""


def test_one_partition_limit_for_spec_and_scale():
    assert scaling.MAX_PARTITIONS is MAX_PARTITIONS == 256
    AppSpec.from_yaml(spec_text(MAX_PARTITIONS))
    with pytest.raises(SpecError) as err:
        AppSpec.from_yaml(spec_text(MAX_PARTITIONS + 1), source="app.yaml")
    assert str(err.value) == ("app.yaml: operators.up.partitions: at most 256 partitions per operator, "
                              "got 257")
    with pytest.raises(SpecError, match="-D operators.up.partitions: at most 256 partitions per operator, got 100000"):
        AppSpec.from_yaml(spec_text(), source="app.yaml", overrides=["operators.up.partitions=100000"])


def test_the_limit_is_documented_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    assert f"at most {MAX_PARTITIONS} partitions" in readme and f"{MAX_NAME_LENGTH} characters" in readme


@pytest.mark.parametrize("where, text", [
    ("name", spec_text(app="a" * 129)),
    ("operators", spec_text(op="o" * 129)),
    ("streams", spec_text(stream="s" * 129)),
])
def test_names_have_a_length_limit(where, text):
    with pytest.raises(SpecError) as err:
        AppSpec.from_yaml(text, source="app.yaml")
    assert err.value.key_path == where
    assert "has 129 characters; at most 128 are allowed" in err.value.reason
    AppSpec.from_yaml(text.replace("a" * 129, "a" * 128).replace("o" * 129, "o" * 128)
                      .replace("s" * 129, "s" * 128))


@pytest.mark.parametrize("body, expected", [
    ("import sys\nsys.exit(2)\n", "importing module 'exits_on_import' called sys.exit(2)"),
    ("import os\nos._exit(3)\n", "importing module 'exits_on_import' ended the process (exit code 3"),
])
def test_a_module_exiting_on_import_is_a_spec_error_naming_it(tmp_path, body, expected):
    (tmp_path / "exits_on_import.py").write_text(body + "from stram.operator import Operator\n"
                                                 "class Op(Operator):\n    pass\n")
    check = ("from stram.master.spec import AppSpec, SpecError\n"
             "try:\n    AppSpec.from_yaml('name: x\\noperators:\\n  a: {class: \"exits_on_import:Op\"}\\n',"
             " source='x.yaml')\nexcept SpecError as exc:\n    print('SPEC ERROR', exc)\n")
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, cwd=ROOT, timeout=60,
                         env={"PYTHONPATH": f"{ROOT}:{tmp_path}", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert "SPEC ERROR x.yaml: operators.a.class: " + expected in out.stdout


def wide(partitions: int) -> AppSpec:
    """src -> up[n] -> (container-local) down[n] -> unifier -> out, past the spec limit on purpose."""
    spec = AppSpec.from_yaml("""
name: wide
operators:
  src: {class: spec_fixture_ops:Source}
  up: {class: spec_fixture_ops:Upper, partitions: 2}
  down: {class: spec_fixture_ops:Upper, partitions: 2}
  out: {class: spec_fixture_ops:Sink}
streams:
  a: {from: src.output, to: [up.input]}
  b: {from: up.output, to: [down.input], locality: CONTAINER_LOCAL}
  c: {from: down.output, to: [out.input]}
""")
    spec.operators["up"].partitions = spec.operators["down"].partitions = partitions
    return spec


def plan_steps(partitions: int) -> int:
    """Lines of Python run to plan ``wide(partitions)`` and compute its committed window once:
    a count of operations (``sys.settrace`` line events), so no clock and no flaky timing."""
    spec = wide(partitions)
    steps = 0

    def tracer(frame, event, arg):  # noqa: ANN001, ANN202
        nonlocal steps
        if event == "line":
            steps += 1
        return tracer

    sys.settrace(tracer)
    try:
        plan = PhysicalPlan.from_spec(spec, -1)
        recovery_checkpoints(plan, -1)
    finally:
        sys.settrace(None)
    assert len(plan.operators) == 2 * partitions + 3
    return steps


def test_planning_is_linear_in_the_partitions():
    """Before: 1,000 partitions 0.06 s, 10,000 9.7 s (partition keys were found by scanning every
    masked hash value, downstream operators by scanning every operator): twice the partitions
    took four times the steps and more; now about twice."""
    small, large = plan_steps(1000), plan_steps(2000)
    assert large / small < 2.5, (small, large)


def test_big_plans_log_their_progress(caplog):
    with caplog.at_level(logging.INFO, logger="stram.master.core.plan"):
        PhysicalPlan.from_spec(wide(300), -1)
    lines = [r.getMessage() for r in caplog.records if r.name == "stram.master.core.plan"]
    assert lines[0] == "planning 602 partitions of 4 operators"
    assert any(line.startswith("planning: stream b wired") for line in lines)
    assert lines[-1].startswith("planned 603 physical operators in ")


def wide_spec(operators: int, partitions: int) -> str:
    """``operators`` chains of a partitioned source into one sink each."""
    ops = "".join(f"  src{i}: {{class: spec_fixture_ops:Source, partitions: {partitions}}}\n"
                  f"  out{i}: {{class: spec_fixture_ops:Sink}}\n" for i in range(operators))
    streams = "".join(f"  s{i}: {{from: src{i}.output, to: [out{i}.input]}}\n" for i in range(operators))
    return f"name: wide\noperators:\n{ops}streams:\n{streams}"


def test_a_whole_application_is_capped_in_containers_and_operators():
    """40 operators of 256 partitions each pass the per-operator limit but not the application's:
    refused before anything starts, naming the attribute; the limits are DAG attributes."""
    with pytest.raises(SpecError) as err:
        AppSpec.from_yaml(wide_spec(40, 256), source="app.yaml")
    planned = PhysicalPlan.from_spec(AppSpec.from_yaml(wide_spec(40, 256), overrides=["MAX_CONTAINERS=100000"]))
    assert str(err.value).startswith(f"app.yaml: attributes.MAX_CONTAINERS: the plan needs "
                                     f"{len(planned.containers):,} containers, more than MAX_CONTAINERS=2,000")
    assert len(planned.operators) > 10_240  # every partition, and the unifiers of the partitioned streams
    with pytest.raises(SpecError, match=f"-D MAX_PHYSICAL_OPERATORS: the plan has {len(planned.operators):,} physical "
                                        f"operators \\(partitions and unifiers\\), more than MAX_PHYSICAL_OPERATORS=10,000"):
        AppSpec.from_yaml(wide_spec(40, 256), overrides=["MAX_CONTAINERS=100000", "MAX_PHYSICAL_OPERATORS=10000"])
    # packing into fewer containers satisfies MAX_CONTAINERS; small plans are not planned at all
    AppSpec.from_yaml(wide_spec(40, 256), overrides=["CONTAINERS_MAX_COUNT=1000"])
    AppSpec.from_yaml(wide_spec(3, 4), overrides=["MAX_CONTAINERS=15", "MAX_PHYSICAL_OPERATORS=18"])
    with pytest.raises(SpecError, match="the plan needs 16 containers, more than MAX_CONTAINERS=15"):
        AppSpec.from_yaml(wide_spec(4, 3), overrides=["MAX_CONTAINERS=15"])
    with pytest.raises(SpecError, match="MAX_CONTAINERS: expected an integer from 1 to 100000"):
        AppSpec.from_yaml(wide_spec(1, 1), overrides=["MAX_CONTAINERS=1000000"])


def test_master_attempts_are_capped():
    AppSpec.from_yaml(spec_text(), overrides=["MASTER_ATTEMPTS=20"])
    for bad in ("21", "1e9", "1000000000"):
        with pytest.raises(SpecError, match="MASTER_ATTEMPTS: expected an integer from 1 to 20"):
            AppSpec.from_yaml(spec_text(), overrides=[f"MASTER_ATTEMPTS={bad}"])


def test_launch_and_dry_run_refuse_a_plan_too_big_before_anything_starts(tmp_path, capsys):
    from stram.client import cli
    from stram.common import apps
    spec = tmp_path / "wide.yaml"
    spec.write_text(wide_spec(40, 256))
    for args in (["launch", str(spec)], ["launch", "--yarn", "--dry-run", str(spec)]):
        assert cli.main(args) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"error: {spec}: attributes.MAX_CONTAINERS: the plan needs")
    assert apps.local_apps() == []  # nothing was registered, let alone started
