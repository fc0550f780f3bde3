"""Specs written to hurt: forged names, absurd nesting. Each is one clear error, never a traceback."""

from __future__ import annotations

import json

import pytest

from stram.client import cli
from stram.master.spec import AppSpec, SpecError

OPS = """
operators:
  src: {class: spec_fixture_ops:Source}
  out: {class: spec_fixture_ops:Sink}
streams:
  a: {from: src.output, to: [out.input]}
"""


@pytest.mark.parametrize("name", ["a\nb", "evil\x1b[2K\rwordcount  SUCCEEDED", "tab\there", " padded", "bell\x07"])
def test_an_application_name_must_be_printable(name):
    """A newline or a terminal escape in a name would forge rows of `stram list-apps`."""
    with pytest.raises(SpecError, match="app.yaml: name: the application name .* must be printable characters"):
        AppSpec.from_yaml(f"name: {json.dumps(name)}\n" + OPS, source="app.yaml")


def test_printable_names_beyond_ascii_are_fine():
    assert AppSpec.from_yaml("name: 'wörd count №2'\n" + OPS).name == "wörd count №2"


@pytest.mark.parametrize("text", ["[" * 10_000 + "]" * 10_000, "a: " + "{b: " * 10_000 + "1" + "}" * 10_000])
def test_yaml_nested_ten_thousand_deep_is_one_error_line(tmp_path, capsys, text):
    with pytest.raises(SpecError, match="nested too deeply"):
        AppSpec.from_yaml(text, source="deep.yaml")
    spec = tmp_path / "deep.yaml"
    spec.write_text(text)
    assert cli.main(["launch", str(spec)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {spec}: invalid YAML: nested too deeply to read (a spec needs a few levels)"]
    # a -D value is read as YAML too (a property that is not a str)
    assert cli.main(["launch", "specs/wordcount.yaml", "-D", "operators.reader.lines_per_window=" + "[" * 10_000]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: specs/wordcount.yaml: -D operators.reader.lines_per_window: cannot read the value as YAML: nested too deeply"]


@pytest.mark.parametrize("old, new", [
    ("container.operators.io:LineReader", "stram.operators.io:LineReader"),
    ("container.receivers:SocketTextReceiver", "stram.receivers:SocketTextReceiver"),
    ("container.connectors.kafka:KafkaInput", "stram.connectors.kafka:KafkaInput"),
    ("container.spark:SparkPipeline", "stram.spark:SparkPipeline"),
])
def test_a_built_in_named_as_before_the_one_package_move_is_told_its_new_name(tmp_path, capsys, old, new):
    spec = tmp_path / "old.yaml"
    spec.write_text(f"name: old\noperators:\n  src: {{class: {old}}}\n")
    assert cli.main(["launch", str(spec)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {spec}: operators.src.class: '{old}' is a name from before stram's one package; "
                   f"use '{new}'"]
