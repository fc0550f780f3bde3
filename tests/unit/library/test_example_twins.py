"""The examples written twice, in YAML and with the dataflow API, compile to the same spec: the same
operators with the same classes, properties and partitions, and the same streams."""

from __future__ import annotations

import pytest
from conftest import ROOT

from stram.flow.loader import load_flow
from stram.master.spec import AppSpec


@pytest.mark.parametrize("name", ["sessions"])
def test_the_flow_and_the_yaml_compile_to_the_same_spec(name, monkeypatch):
    monkeypatch.chdir(ROOT)
    from_yaml = AppSpec.from_file(ROOT / "specs" / f"{name}.yaml").to_dict()
    from_flow = load_flow(str(ROOT / "specs" / f"{name}_flow.py")).compile().to_dict()
    from_yaml.pop("description", None)
    from_flow.pop("description", None)
    assert from_flow == from_yaml
    # the window's event time came from the source in both: explicit in the flow, inferred in YAML
    assert from_yaml["operators"]["sessions"]["properties"]["timestamp_field"] == "ts"
