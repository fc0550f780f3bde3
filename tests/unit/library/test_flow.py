"""The dataflow API (stram.flow): what a flow compiles to, its errors and names, its operators, and
functions pickled by value so that a process that cannot import the app file still runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import yaml

from stram.agent.engine.batch import batch_handler
from stram.client import cli
from stram.common import pickled
from stram.flow import Flow, FlowError, load_flow, ops, windows
from stram.master.spec import AppSpec, SpecError
from stram.operator import FatalError, OperatorContext
from stram.operators.aggregate import KeyCounter


def operator_of(spec: dict, name: str) -> dict:
    return spec["operators"][name]


def loaded(props: dict, name: str):
    return pickled.loads(props[name])


def bids_flow() -> tuple[Flow, object]:
    flow = Flow("bids", attributes={"STREAMING_WINDOW_SIZE_MILLIS": 200})
    return flow, flow.read_jsonl("data/bids", timestamp_field="dateTime", out_of_orderness_ms=5000)


# ---------------------------------------------------------------- compiling to the YAML form

def test_a_windowed_count_compiles_to_the_yaml_forms_operator():
    flow, bids = bids_flow()
    bids.key_by("auction").window(windows.tumbling(10_000), allowed_lateness_ms=0).count()
    yaml_form = yaml.safe_load("""
        class: stram.operators.window:WindowedAggregate
        properties: {key_field: auction, timestamp_field: dateTime,
                     window: {kind: tumbling, size_ms: 10000}, aggregate: count}
    """)
    spec = flow.to_spec()
    assert operator_of(spec, "count") == yaml_form
    assert operator_of(spec, "read_jsonl") == yaml.safe_load("""
        class: stram.operators.io:JsonLinesReader
        properties: {path: data/bids, timestamp_field: dateTime, out_of_orderness_ms: 5000}
    """)
    assert spec["streams"] == {"read_jsonl": {"from": "read_jsonl.output", "to": ["count.input"]}}


@pytest.mark.parametrize("call, aggregate", [
    (lambda w: w.sum("price"), "sum:price"),
    (lambda w: w.min("price"), "min:price"),
    (lambda w: w.max("price"), "max:price"),
    (lambda w: w.mean("price"), "mean:price"),
    (lambda w: w.top_k(3, "price"), "topk:3:price"),
    (lambda w: w.collect(), "collect"),
    (lambda w: w.collect("bidder"), "collect:bidder"),
])
def test_aggregates_of_a_field_name_it_in_the_aggregate_string(call, aggregate):
    flow, bids = bids_flow()
    call(bids.key_by("auction").window(windows.sliding(10_000, 2_000)))
    (props,) = [op["properties"] for op in flow.to_spec()["operators"].values()
                if op["class"].endswith("WindowedAggregate")]
    assert props == {"key_field": "auction", "timestamp_field": "dateTime", "aggregate": aggregate,
                     "window": {"kind": "sliding", "size_ms": 10_000, "slide_ms": 2_000}}


def test_functions_become_pickled_fn_properties():
    flow, bids = bids_flow()
    keyed = bids.key_by(lambda r: r["auction"] % 7)
    keyed.window(windows.session(30_000), timestamp=lambda r: r["t"] * 1000).sum(lambda r: r["price"] * 2)
    props = operator_of(flow.to_spec(), "sum")["properties"]
    assert set(props) == {"key_fn", "timestamp_fn", "window", "aggregate", "value_fn"}
    record = {"auction": 23, "t": 5, "price": 4}
    assert loaded(props, "key_fn")(record) == 23 % 7
    assert loaded(props, "timestamp_fn")(record) == 5000
    assert loaded(props, "value_fn")(record) == 8
    assert props["aggregate"] == "sum" and props["window"] == {"kind": "session", "gap_ms": 30_000}


def test_a_window_fold_pickles_an_aggregator_object():
    flow, bids = bids_flow()
    bids.key_by("auction").window(windows.tumbling(1000)).fold(
        list, lambda acc, r: acc + [r["price"]], result=lambda acc: sorted(acc))
    agg = loaded(operator_of(flow.to_spec(), "fold")["properties"], "aggregator")
    acc = agg.create()
    for price in (5, 1, 3):
        acc = agg.add(acc, {"price": price})
    assert agg.result(acc) == [1, 3, 5] and agg.merge is None


def test_window_options_compile_as_given():
    flow, bids = bids_flow()
    trigger = {"early_ms": 1000, "mode": "discarding"}
    counts = bids.key_by("auction").window(windows.tumbling(10_000, origin_ms=500), allowed_lateness_ms=2000,
                                           trigger=trigger).count()
    bids.key_by("auction").window(windows.tumbling(5_000, time="processing")).count(name="by_clock")
    counts.late.write_jsonl("out/late")
    spec = flow.to_spec()
    props = operator_of(spec, "count")["properties"]
    assert props["window"] == {"kind": "tumbling", "size_ms": 10_000, "origin_ms": 500}
    assert props["allowed_lateness_ms"] == 2000 and props["trigger"] == trigger
    assert "timestamp_field" not in operator_of(spec, "by_clock")["properties"]  # processing time
    assert spec["streams"]["count_late"] == {"from": "count.late", "to": ["write_jsonl.input"]}


def test_joins_and_dedup_compile_to_their_operators():
    flow = Flow("j")
    left = flow.read_jsonl("l", timestamp_field="lt").key_by("id")
    right = flow.read_jsonl("r", timestamp_field="rt").key_by(lambda r: r["ref"])
    left.join(right, windows.tumbling(1000), how="left")
    left.interval_join(right, -500, 500, other_timestamp="other_t")
    left.dedup(60_000)
    ops_ = flow.to_spec()["operators"]
    join = ops_["join"]
    assert join["class"] == "stram.operators.join:WindowedJoin"
    assert {k: v for k, v in join["properties"].items() if k != "right_key_fn"} == {
        "left_key_field": "id", "left_timestamp_field": "lt", "right_timestamp_field": "rt",
        "window": {"kind": "tumbling", "size_ms": 1000}, "how": "left"}
    assert loaded(join["properties"], "right_key_fn")({"ref": 9}) == 9
    assert ops_["interval_join"]["properties"]["right_timestamp_field"] == "other_t"
    assert ops_["interval_join"]["properties"]["lower_ms"] == -500
    assert "allowed_lateness_ms" not in ops_["interval_join"]["properties"]
    left.interval_join(right, 0, 10, allowed_lateness_ms=0, name="strict")
    assert flow.to_spec()["operators"]["strict"]["properties"]["allowed_lateness_ms"] == 0
    with pytest.raises(FlowError, match="allowed_lateness_ms"):
        left.interval_join(right, 0, 10, allowed_lateness_ms=-1)
    assert ops_["dedup"] == {"class": "stram.operators.dedup:Dedup", "properties": {
        "key_field": "id", "timestamp_field": "lt", "within_ms": 60_000}}
    streams = flow.to_spec()["streams"]
    assert streams["read_jsonl"]["to"] == ["join.left", "interval_join.left", "dedup.input", "strict.left"]
    assert streams["read_jsonl_2"]["to"] == ["join.right", "interval_join.right", "strict.right"]


def test_event_time_flows_pass_the_spec_check():
    """Every window, join and dedup form compiles to properties the operators declare, of their types."""
    flow, bids = bids_flow()
    keyed = bids.key_by("auction")
    for window in (windows.tumbling(1000), windows.sliding(1000, 500), windows.session(1000)):
        w = keyed.window(window, allowed_lateness_ms=10, trigger={"early_ms": 100})
        for result in (w.count(), w.sum("price"), w.top_k(2, lambda r: r["price"]), w.collect(),
                       w.fold(int, lambda a, r: a + 1, merge=lambda a, b: a + b)):
            result.write_jsonl("o")
            result.late.write_jsonl("late")
    other = flow.read_jsonl("people", timestamp_field="t").key_by(lambda r: r["id"])
    keyed.join(other, windows.tumbling(1000), how="left").write_jsonl("j")
    keyed.interval_join(other, 0, 500).write_jsonl("ij")
    keyed.interval_join(other, 0, 500, allowed_lateness_ms=0).write_jsonl("ij0")
    keyed.dedup(1000).late.write_jsonl("d")
    spec = flow.compile()
    assert len([op for op in spec.operators.values() if op.class_name.endswith("WindowedAggregate")]) == 15


# ---------------------------------------------------------------- event time

def test_the_timestamp_field_comes_from_the_nearest_source_through_other_steps():
    flow = Flow("t")
    a = flow.read_jsonl("a", timestamp_field="ta")
    b = flow.generate(rate=10)
    mixed = a.map(lambda r: r).filter(bool).union(flow.read_lines("x").map(json.loads))
    mixed.key_by("k").window(windows.tumbling(100)).count()
    b.key_by("key").window(windows.tumbling(100)).count()
    spec = flow.to_spec()
    assert operator_of(spec, "count")["properties"]["timestamp_field"] == "ta"
    assert operator_of(spec, "count_2")["properties"]["timestamp_field"] == "ts"  # the generator's field


@pytest.mark.parametrize("build, message", [
    (lambda f: f.read_lines("x").key_by("k").window(windows.tumbling(100)), "no event time"),
    (lambda f: f.read_jsonl("a", timestamp_field="ta").union(f.read_jsonl("b", timestamp_field="tb"))
     .key_by("k").window(windows.tumbling(100)), "different event-time fields"),
    (lambda f: f.read_jsonl("a", timestamp_field="ta").key_by("k").window(windows.tumbling(100)).count()
     .key_by("key").window(windows.tumbling(1000)), "carry no source's event-time field"),
])
def test_no_single_event_time_is_a_clear_error(build, message):
    with pytest.raises(FlowError, match=message) as err:
        build(Flow("t"))
    assert "timestamp=" in str(err.value)


# ---------------------------------------------------------------- names and streams

def test_names_are_derived_deterministically_around_the_given_ones():
    def build() -> dict:
        flow = Flow("n")
        s = flow.read_lines("x")
        s.map(str.upper).map(str.lower, name="map_2").map(str.strip).write_jsonl("o")
        s.filter(bool, name="keep").write_jsonl("p")
        return flow.to_spec()
    spec = build()
    assert list(spec["operators"]) == ["read_lines", "map", "map_2", "map_3", "write_jsonl", "keep", "write_jsonl_2"]
    assert list(spec["streams"]) == ["read_lines", "map", "map_2", "map_3", "keep"]
    assert spec["streams"]["read_lines"]["to"] == ["map.input", "keep.input"]
    assert list(build()["operators"]) == list(spec["operators"])


def test_placement_localities_rules_and_labels_reach_the_spec():
    rules = [{"type": "ANTI_AFFINITY", "operators": ["count"]}, {"type": "AFFINITY", "regex": "read|upper"}]
    flow = Flow("placed", attributes={"AFFINITY_RULES": rules})
    lines = flow.read_lines("x", name="read")
    lines.map(str.upper, name="upper", locality="NODE_LOCAL").to(
        KeyCounter, name="count", partitions=2, locality="rack_local").write_jsonl("o")
    spec = flow.compile(["operators.count.attributes.NODE_LABEL=ssd"])
    assert (spec.streams["read"].locality, spec.streams["upper"].locality) == ("NODE_LOCAL", "RACK_LOCAL")
    assert [r["operators" if "operators" in r else "regex"] for r in spec.attribute("AFFINITY_RULES")] == \
        [["count"], "read|upper"]
    assert spec.attribute("NODE_LABEL", "count") == "ssd"
    bad = Flow("bad", attributes={"AFFINITY_RULES": [{"type": "ANTI_AFFINITY", "operators": ["nope", "x"]}]})
    bad.read_lines("x", name="x").write_jsonl("o")
    with pytest.raises(SpecError, match="unknown operator 'nope'"):
        bad.compile()


def test_branch_union_and_to_wire_their_ports():
    flow = Flow("b")
    yes, no = flow.read_lines("x").branch(lambda line: line.startswith("#"))
    merged = yes.map(str.upper).union(no, locality="CONTAINER_LOCAL")
    merged.to(KeyCounter, partitions=3).write_jsonl("o")
    spec = flow.to_spec()
    assert spec["streams"]["branch"] == {"from": "branch.output", "to": ["map.input"]}
    assert spec["streams"]["branch_rest"] == {"from": "branch.rest", "to": ["union.input1"],
                                              "locality": "CONTAINER_LOCAL"}
    assert spec["streams"]["map"]["to"] == ["union.input0"]
    assert operator_of(spec, "key_counter") == {"class": "stram.operators.aggregate:KeyCounter", "partitions": 3}
    AppSpec.from_dict(spec)  # a valid spec


def test_a_union_of_many_streams_chains_unions():
    flow = Flow("u")
    sources = [flow.read_lines(f"f{i}") for i in range(11)]
    sources[0].union(*sources[1:], name="all").write_jsonl("o")
    spec = AppSpec.from_dict(flow.to_spec())
    feeding = {s.source.operator for s in spec.streams.values() for t in s.sinks if t.operator in ("union", "all")}
    assert feeding == {f"read_lines{'' if i == 0 else f'_{i + 1}'}" for i in range(11)} | {"union"}
    assert spec.upstream("write_jsonl") == ["all"]


@pytest.mark.parametrize("build, message", [
    (lambda f: f.read_lines("x").map(1), "map takes a function"),
    (lambda f: f.read_lines("x").map(str, name="has space"), "invalid step name"),
    (lambda f: [f.read_lines("x", name="a"), f.read_lines("y", name="a")], "already has a step named 'a'"),
    (lambda f: f.read_lines("x").map(str, partitions=0), "partitions must be an integer >= 1"),
    (lambda f: f.read_lines("x").map(str, locality="NEAR"), "locality must be one of"),
    (lambda f: f.read_lines("x").to(KeyCounter, wrong=1), "has no property 'wrong'"),
    (lambda f: f.read_lines("x").to("stram.operators.aggregate:KeyCounter", port="in"), "no input port 'in'"),
    (lambda f: f.read_lines("x").to("nowhere.at_all:Op"), "cannot import module 'nowhere.at_all'"),
    (lambda f: f.read_lines("x").union(Flow("other").read_lines("y")), "belongs to flow 'other'"),
    (lambda f: f.read_lines("x").late, "no late records"),
    (lambda f: f.read_lines("x").key_by(3), "key_by takes a field name or a function"),
    (lambda f: windows.sliding(100, 200), "slide_ms \\(200\\) must not exceed size_ms"),
    (lambda f: f.source(KeyCounter), "is not an InputOperator"),
])
def test_mistakes_are_clear_errors(build, message):
    with pytest.raises(FlowError, match=message):
        build(Flow("e"))


def test_readers_asking_different_localities_of_one_stream_is_an_error():
    flow = Flow("l")
    s = flow.read_lines("x")
    s.map(str, locality="THREAD_LOCAL")
    s.filter(bool, locality="CONTAINER_LOCAL")
    with pytest.raises(FlowError, match="one locality for all its readers"):
        flow.to_spec()
    with pytest.raises(FlowError, match="has no steps"):
        Flow("empty").to_spec()


def test_compile_validates_and_applies_overrides():
    flow = Flow("c")
    flow.read_lines("x").to(KeyCounter).write_jsonl("o")
    spec = flow.compile(["operators.key_counter.partitions=2", "operators.write_jsonl.path=elsewhere"])
    assert spec.operators["key_counter"].partitions == 2
    assert spec.operators["write_jsonl"].properties == {"path": "elsewhere"}
    with pytest.raises(SpecError, match="key_counter"):
        flow.compile(["operators.key_counter.partitions=none"])


# ---------------------------------------------------------------- the operators

class Collect:
    """What an operator emits on one port, in order."""

    def __init__(self) -> None:
        self.rows: list = []

    def emit(self, row) -> None:
        self.rows.append(row)

    def emit_batch(self, rows) -> None:
        self.rows.extend(rows)


def running(cls, name: str = "step", **props):
    op = cls()
    for key, value in props.items():
        setattr(op, key, pickled.dumps(value) if callable(value) or key == "init" else value)
    op.setup(OperatorContext(id=1, name=name))
    op.output = Collect()
    if hasattr(op, "rest"):
        op.rest = Collect()
    return op


LINES = ["a b", "", "c dd eee", "a"]


@pytest.mark.parametrize("cls, fn, truth", [
    (ops.Map, len, [len(x) for x in LINES]),
    (ops.Filter, bool, [x for x in LINES if x]),
    (ops.FlatMap, str.split, [w for x in LINES for w in x.split()]),
])
def test_per_record_operators_take_whole_batches(cls, fn, truth):
    op = running(cls, fn=fn)
    batch_handler(op, "input")(LINES[:2])
    batch_handler(op, "input")(LINES[2:])
    assert op.output.rows == truth


def test_inspect_branch_and_union(capsys):
    op = running(ops.Inspect, fn=print)  # the function travels pickled: its effect is what is seen
    batch_handler(op, "input")(LINES)
    assert capsys.readouterr().out == "".join(f"{x}\n" for x in LINES) and op.output.rows == LINES
    op = running(ops.Branch, fn=lambda line: " " in line)
    batch_handler(op, "input")(LINES)
    assert op.output.rows == [x for x in LINES if " " in x] and op.rest.rows == [x for x in LINES if " " not in x]
    union = ops.Union()
    union.output = Collect()
    batch_handler(union, "input0")([1, 2])
    batch_handler(union, "input7")([3])
    assert union.output.rows == [1, 2, 3]


def test_map_batches_goes_through_arrow():
    import pyarrow.compute as pc

    def double(batch):
        return batch.set_column(1, "v", pc.multiply(batch.column("v"), 2))

    op = running(ops.MapBatches, fn=double)
    rows = [{"k": f"k{i}", "v": i} for i in range(5)]
    batch_handler(op, "input")(rows)
    assert op.output.rows == [{"k": r["k"], "v": r["v"] * 2} for r in rows]
    with pytest.raises(FatalError, match="takes dict records"):
        batch_handler(op, "input")(["text"])
    bad = running(ops.MapBatches, name="mb", fn=lambda batch: 3)
    with pytest.raises(FatalError, match="'mb'.*returned a int"):
        batch_handler(bad, "input")(rows)


def test_keyed_reduce_emits_changed_keys_and_splits_its_state():
    words = "a b a c b a d".split()
    op = running(ops.KeyedReduce, key_fn=lambda w: w, fn=lambda n, _: n + 1, init=0)
    op.begin_window(1)
    batch_handler(op, "input")(words[:4])
    op.end_window()
    first = {r["key"]: r["value"] for r in op.output.rows}
    assert first == {w: words[:4].count(w) for w in set(words[:4])}
    op.output.rows.clear()
    op.begin_window(2)
    batch_handler(op, "input")(words[4:])
    op.end_window()
    assert {r["key"]: r["value"] for r in op.output.rows} == {w: words.count(w) for w in set(words[4:])}
    # reduce (no init): the first record starts the accumulator
    red = running(ops.KeyedReduce, key_field="k", fn=lambda acc, r: {"k": acc["k"], "n": acc["n"] + r["n"]})
    batch_handler(red, "input")([{"k": "x", "n": 2}, {"k": "x", "n": 5}])
    red.end_window()
    assert red.output.rows == [{"key": "x", "value": {"k": "x", "n": 7}}]
    owner = {"a": 0, "b": 1, "c": 1, "d": 0}.__getitem__
    states = ops.KeyedReduce.split_state([op.get_state()], 2, owner)
    assert [set(s["accs"]) for s in states] == [{"a", "d"}, {"b", "c"}]
    assert ops.KeyedReduce.partition_key({"key_field": "k"}, "input") == "field:k"


def test_operators_with_bad_properties_fail_naming_operator_and_property():
    with pytest.raises(FatalError, match="'splitter'.*'fn' is missing"):
        running(ops.Map, name="splitter")
    with pytest.raises(FatalError, match="'m'.*'fn' cannot be unpickled"):
        running(ops.Map, name="m", fn="cloudpickle:AAAA")
    with pytest.raises(FatalError, match="'r'.*exactly one of the properties 'key_field' and 'key_fn'"):
        running(ops.KeyedReduce, name="r", fn=max)
    op = running(ops.KeyedReduce, name="r", key_field="k", fn=max)
    with pytest.raises(FatalError, match="'r': a record has no field 'k'"):
        batch_handler(op, "input")([{"j": 1}])


# ---------------------------------------------------------------- app files and pickling by value

APP = """
import re
from stram.flow import Flow

WORD = re.compile(r"[a-z]+")

def split(line):
    return [w for w in WORD.findall(line.lower()) if w not in STOP]

class Scale:
    def __init__(self, k):
        self.k = k
    def __call__(self, n):
        return n * self.k * FACTOR

def adder(step):
    return lambda acc, _: acc + step

flow = Flow("byvalue")
words = flow.read_lines("in.txt").flat_map(split)
words.key_by(lambda w: w[0]).fold(0, adder(2)).map(lambda r: Scale(3)(r["value"])).write_jsonl("out")
STOP = {"the", "a"}
FACTOR = 10
"""


def test_app_functions_travel_by_value_to_a_process_that_cannot_import_the_app(tmp_path):
    app_dir = tmp_path / "app"
    app_dir.mkdir()
    (app_dir / "myapp.py").write_text(APP)
    flow = load_flow(str(app_dir / "myapp.py"))
    ops_ = flow.to_spec()["operators"]
    texts = {"split": ops_["flat_map"]["properties"]["fn"], "fold": ops_["fold"]["properties"]["fn"],
             "key": ops_["fold"]["properties"]["key_fn"], "scale": ops_["map"]["properties"]["fn"]}
    line, acc, record = "The cat and a Dog", 5, {"key": "c", "value": 4}
    # the oracle: the same arithmetic written out here
    truth = {"split": ["cat", "and", "dog"], "fold": acc + 2, "key": "c", "scale": 4 * 3 * 10}
    probe = textwrap.dedent(f"""
        import json, sys
        try:
            import myapp
        except ImportError:
            pass
        else:
            sys.exit("the app module imported here")
        from stram.common import pickled
        texts = json.loads(sys.argv[1])
        print(json.dumps({{"split": pickled.loads(texts["split"])({line!r}),
                          "fold": pickled.loads(texts["fold"])({acc!r}, "x"),
                          "key": pickled.loads(texts["key"])("cat"),
                          "scale": pickled.loads(texts["scale"])({record!r})}}))
    """)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", probe, json.dumps(texts)], cwd=elsewhere, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == truth


@pytest.mark.parametrize("body, message", [
    ("x = 1\ndef f(): pass\n", "defines no Flow at module level \\(found: f, x\\)"),
    ("from stram.flow import Flow\na = Flow('one')\nb = Flow('two')\n", "several Flows.*a \\('one'\\), b \\('two'\\)"),
    ("from stram.flow import Flow\n\nflow = Flow('f')\nflow.read_lines('x').map(undefined)\n",
     "failed \\(line 4\\): NameError"),
    ("from stram.flow import Flow\nFlow('f').read_lines('x').map(3)\n", "app.py \\(line 2\\): map takes a function"),
])
def test_app_files_without_one_flow_are_clear_errors(tmp_path, body, message):
    path = tmp_path / "app.py"
    path.write_text(body)
    with pytest.raises(FlowError, match=message):
        load_flow(str(path))


def test_launch_of_a_bad_app_file_is_one_error_line(tmp_path, capsys):
    (tmp_path / "app.py").write_text("x = 1\n")
    assert cli.main(["launch", str(tmp_path / "app.py")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "defines no Flow" in err and "Traceback" not in err
    assert cli.main(["launch", str(tmp_path / "missing.py")]) == 1
    assert "no such app file" in capsys.readouterr().err
    assert cli.main(["launch", "--json", "specs/wordcount.yaml"]) == 1
    assert "--json goes with --print-dag" in capsys.readouterr().err


def test_yarn_dry_run_ships_the_compiled_spec(tmp_path, capsys):
    import pathlib

    import skein
    (tmp_path / "app.py").write_text(APP)
    assert cli.main(["launch", "--yarn", "--dry-run", str(tmp_path / "app.py"),
                     "-D", "operators.read_lines.path=hdfs:///in.txt"]) == 0
    aspec = skein.ApplicationSpec.from_yaml(capsys.readouterr().out)
    shipped = pathlib.Path(aspec.master.files["spec.yaml"].source[len("file://"):]).read_text()
    spec = AppSpec.from_yaml(shipped)
    assert spec.name == "byvalue" and spec.operators["read_lines"].properties["path"] == "hdfs:///in.txt"
    assert pickled.loads(spec.operators["flat_map"].properties["fn"])("the big bad wolf") == ["big", "bad", "wolf"]


def test_sources_in_an_alignment_group_compile_to_its_attributes():
    flow = Flow("joined")
    a = flow.read_parquet("a.parquet", timestamp_field="t", align="g", max_drift_ms=5000, name="a")
    b = flow.read_jsonl("b", timestamp_field="t", align="g", name="b")
    a.key_by("k").interval_join(b.key_by("k"), 0, 10).write_jsonl("out")
    spec = flow.compile()
    assert spec.operators["a"].attributes == {"WATERMARK_ALIGNMENT_GROUP": "g", "WATERMARK_MAX_DRIFT_MILLIS": 5000}
    assert spec.operators["b"].attributes == {"WATERMARK_ALIGNMENT_GROUP": "g"}
    with pytest.raises(FlowError, match="align needs event time"):
        flow.read_jsonl("c", align="g")
    with pytest.raises(FlowError, match="max_drift_ms goes with align"):
        flow.read_jsonl("c", timestamp_field="t", max_drift_ms=5)
    with pytest.raises(FlowError, match="milliseconds >= 0"):
        flow.read_jsonl("c", timestamp_field="t", align="g", max_drift_ms=-1)
