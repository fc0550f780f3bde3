"""AppSpec: a whole application spec, loaded, validated, written back and queried."""

from __future__ import annotations

import copy
import heapq
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from stram.common import attributes as attrs
from stram.master.spec.build import Builder, check_size
from stram.master.spec.errors import SpecError
from stram.master.spec.overrides import apply_override
from stram.master.spec.parts import OperatorSpec, StreamSpec, plain_data
from stram.master.spec.yamlio import dump_yaml, load_yaml

__all__ = ["AppSpec"]


@dataclass
class AppSpec:
    """A validated application: operators, streams and attributes.

    Build it with :meth:`from_file`, :meth:`from_yaml` or :meth:`from_dict`;
    they reject anything that could not run, raising :class:`SpecError`.
    """

    name: str
    #: Explicitly set DAG attributes (canonical names, coerced values).
    attributes: dict[str, Any] = field(default_factory=dict)
    #: Operators in file order.
    operators: dict[str, OperatorSpec] = field(default_factory=dict)
    streams: dict[str, StreamSpec] = field(default_factory=dict)
    #: Where the spec came from (used in error messages; not compared).
    source: str = field(default="<dict>", compare=False)
    description: str = ""

    # -- loading -----------------------------------------------------------
    @classmethod
    def from_file(cls, path: str | Path, overrides: Iterable[str] = ()) -> "AppSpec":
        """Read and validate a YAML spec file.

        Parameters
        ----------
        path:
            The spec file.
        overrides:
            ``-D`` strings ``"NAME=VALUE"``, applied in order; see :meth:`with_overrides`.

        Raises
        ------
        SpecError
            The file cannot be read, or the spec or an override is invalid.
        """
        source = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise SpecError(source, "", f"cannot read the spec: {exc}") from None
        return cls.from_yaml(text, source=source, overrides=overrides)

    @classmethod
    def from_yaml(cls, text: str, source: str = "<string>",
                  overrides: Iterable[str] = ()) -> "AppSpec":
        """Parse and validate a YAML spec.

        Parameters
        ----------
        text:
            The YAML document.
        source:
            Name used in error messages (the file path).
        overrides:
            ``-D`` strings, see :meth:`with_overrides`.

        Raises
        ------
        SpecError
            Invalid YAML (the reason gives line and column), duplicate keys,
            or an invalid spec or override.
        """
        data = load_yaml(text, source)
        return cls.from_dict(data, source=source, overrides=overrides)

    @classmethod
    def from_dict(cls, data: Any, source: str = "<dict>",
                  overrides: Iterable[str] = ()) -> "AppSpec":
        """Validate a spec given as plain data (what ``yaml.safe_load`` returns).

        Raises
        ------
        SpecError
            The spec or an override is invalid.
        """
        overrides = list(overrides)
        # the plan's size is judged once the overrides are in: they may lower partition counts or raise limits
        spec = _build(copy.deepcopy(data), source, sized=not overrides)
        return spec.with_overrides(overrides) if overrides else spec

    def with_overrides(self, overrides: Iterable[str]) -> "AppSpec":
        """A copy of this spec with ``-D`` overrides applied, validated again.

        Each override is ``"KEY=VALUE"``; VALUE is read as YAML (so numbers and
        booleans get their types) except for properties declared ``str``, which
        keep the raw text, and attributes, which convert strings themselves.
        Keys:

        - ``NAME`` or ``attributes.NAME``: a DAG attribute;
        - ``operators.<op>.<property>`` or ``operators.<op>.properties.<property>``;
        - ``operators.<op>.attributes.<ATTR>``, ``operators.<op>.partitions``,
          ``operators.<op>.class``, ``operators.<op>.port_attributes.<port>.<ATTR>``;
        - ``streams.<stream>.locality``, ``streams.<stream>.codec`` (``null`` unsets).

        Raises
        ------
        SpecError
            With key path ``-D <key>`` when an override is malformed or its
            value is invalid; other problems the overrides cause name their
            key path and say that the overrides were applied.
        """
        data = self.to_dict()
        origin: dict[str, str] = {}
        for item in overrides:
            path, label = apply_override(self, data, item)
            origin[path] = label
        return _build(data, self.source, origin)

    def validate(self) -> None:
        """Check a spec that was built or changed by hand.

        Raises
        ------
        SpecError
            As :meth:`from_dict` would for ``self.to_dict()``.
        """
        _build(self.to_dict(), self.source)

    # -- writing -----------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain data that :meth:`from_dict` turns back into an equal spec."""
        out: dict[str, Any] = {"name": self.name}
        if self.description:
            out["description"] = self.description
        if self.attributes:
            out["attributes"] = plain_data(self.attributes)
        out["operators"] = {name: op.to_dict() for name, op in self.operators.items()}
        if self.streams:
            out["streams"] = {name: s.to_dict() for name, s in self.streams.items()}
        return out

    def to_yaml(self) -> str:
        """The spec as YAML, in file order."""
        return dump_yaml(self.to_dict())

    # -- queries -----------------------------------------------------------
    def attribute(self, name: str, operator: str | None = None) -> Any:
        """Effective value of an attribute.

        Parameters
        ----------
        name:
            Attribute name or alias.
        operator:
            A logical operator name: its own value wins over the DAG's.

        Returns
        -------
        The operator's value if set (and the attribute has operator scope),
        else the DAG's value if set, else the default.

        Raises
        ------
        ValueError
            Unknown attribute name.
        KeyError
            Unknown operator.
        """
        canonical = attrs.canonical_name(name)
        if operator is not None:
            own = self.operators[operator].attributes
            if canonical in own:
                return own[canonical]
        if canonical in self.attributes:
            return self.attributes[canonical]
        return attrs.default(canonical)

    def port_attribute(self, operator: str, port: str, name: str) -> Any:
        """Effective value of a port attribute (set on the port, else the default)."""
        canonical = attrs.canonical_name(name)
        own = self.operators[operator].port_attributes.get(port, {})
        return own[canonical] if canonical in own else attrs.default(canonical)

    def topological_order(self) -> list[str]:
        """Operator names, every operator after all of its upstream operators.

        Ties are broken by file order, so the order is deterministic.
        """
        index = {name: i for i, name in enumerate(self.operators)}
        indegree = {name: len(self.upstream(name)) for name in self.operators}
        ready = [index[n] for n, d in indegree.items() if d == 0]
        heapq.heapify(ready)
        names = list(self.operators)
        order: list[str] = []
        while ready:
            name = names[heapq.heappop(ready)]
            order.append(name)
            for down in self.downstream(name):
                indegree[down] -= 1
                if indegree[down] == 0:
                    heapq.heappush(ready, index[down])
        return order

    def upstream(self, operator: str) -> list[str]:
        """Names of the operators feeding ``operator`` (each once, in stream order)."""
        found: dict[str, None] = {}
        for stream in self.input_streams(operator).values():
            found[stream.source.operator] = None
        return list(found)

    def downstream(self, operator: str) -> list[str]:
        """Names of the operators ``operator`` feeds (each once, in stream order)."""
        found: dict[str, None] = {}
        for stream in self.output_streams(operator).values():
            for sink in stream.sinks:
                found[sink.operator] = None
        return list(found)

    def input_streams(self, operator: str) -> dict[str, StreamSpec]:
        """Input port name -> the stream feeding it, for the connected ports of ``operator``."""
        return {sink.port: stream for stream in self.streams.values()
                for sink in stream.sinks if sink.operator == operator}

    def output_streams(self, operator: str) -> dict[str, StreamSpec]:
        """Output port name -> the stream it is the source of, for ``operator``."""
        return {stream.source.port: stream for stream in self.streams.values()
                if stream.source.operator == operator}


def _build(data: Any, source: str, origin: Mapping[str, str] | None = None, sized: bool = True) -> AppSpec:
    """An :class:`AppSpec` from plain data, its parts checked first, then its graph, then (``sized``)
    the size of its plan.

    ``origin`` maps key paths set by ``-D`` overrides to their ``-D`` label
    (see :class:`~stram.master.spec.build.Builder`).
    """
    builder = Builder(source, origin)
    spec = AppSpec(**builder.fields(data))
    builder.check_graph(spec)
    if sized:
        check_size(spec, builder.error)
    return spec
