"""The parts of a spec: port references, operators and streams, and the values they may take."""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any, Protocol

from stram.common.attributes import show
from stram.master.spec.imports import load_operator_class
from stram.operator import Operator

__all__ = ["PortRef", "OperatorSpec", "StreamSpec", "LOCALITIES", "INLINE_LOCALITIES", "CODECS"]

#: Stream localities, tightest first.
LOCALITIES = ("THREAD_LOCAL", "CONTAINER_LOCAL", "NODE_LOCAL", "RACK_LOCAL")
#: Localities that put both ends of a stream in one container.
INLINE_LOCALITIES = ("THREAD_LOCAL", "CONTAINER_LOCAL")
#: Stream codecs.
CODECS = ("pickle", "arrow")

_PORT_REF_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_-]*)\.([A-Za-z_][A-Za-z0-9_]*)\Z")


@dataclass(frozen=True)
class PortRef:
    """A port of a logical operator, written ``"operator.port"``."""

    operator: str
    port: str

    @classmethod
    def parse(cls, text: Any) -> "PortRef":
        """Parse ``"operator.port"``.

        Raises
        ------
        ValueError
            ``text`` is not of that form.
        """
        match = _PORT_REF_RE.match(text) if isinstance(text, str) else None
        if not match:
            raise ValueError(f"expected 'operator.port', got {show(text)}")
        return cls(match.group(1), match.group(2))

    def __str__(self) -> str:
        return f"{self.operator}.{self.port}"


@dataclass
class OperatorSpec:
    """A logical operator: its class, properties, partition count and attributes."""

    name: str
    #: ``"module:Class"`` of an :class:`~stram.operator.Operator` subclass.
    class_name: str
    #: Explicitly set properties, already checked against the class's annotations.
    properties: dict[str, Any] = field(default_factory=dict)
    partitions: int = 1
    #: Explicitly set operator attributes (canonical names, coerced values).
    attributes: dict[str, Any] = field(default_factory=dict)
    #: Port name -> explicitly set port attributes.
    port_attributes: dict[str, dict[str, Any]] = field(default_factory=dict)

    def load_class(self) -> type[Operator]:
        """Import and return the operator class.

        Raises
        ------
        ValueError
            The class cannot be imported or is no Operator subclass.
        """
        return load_operator_class(self.class_name)

    def instantiate(self) -> Operator:
        """A new instance of the operator class with the spec's properties set."""
        operator = self.load_class()()
        for name, value in self.properties.items():
            setattr(operator, name, copy.deepcopy(value))
        return operator

    def to_dict(self) -> dict[str, Any]:
        """The operator's entry in a spec (keys left out when at their defaults)."""
        out: dict[str, Any] = {"class": self.class_name}
        if self.properties:
            out["properties"] = plain_data(self.properties)
        if self.partitions != 1:
            out["partitions"] = self.partitions
        if self.attributes:
            out["attributes"] = plain_data(self.attributes)
        if self.port_attributes:
            out["port_attributes"] = plain_data(self.port_attributes)
        return out


@dataclass
class StreamSpec:
    """A logical stream from one output port to one or more input ports."""

    name: str
    source: PortRef
    sinks: list[PortRef]
    #: One of :data:`LOCALITIES`, or None (no constraint).
    locality: str | None = None
    #: One of :data:`CODECS`, or None (the ports' codec).
    codec: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The stream's entry in a spec."""
        out: dict[str, Any] = {"from": str(self.source), "to": [str(s) for s in self.sinks]}
        if self.locality is not None:
            out["locality"] = self.locality
        if self.codec is not None:
            out["codec"] = self.codec
        return out


class SpecGraph(Protocol):
    """What the graph checks and ``-D`` overrides read of a spec (:class:`~.appspec.AppSpec` is one),
    so that they need not import the class that calls them."""

    operators: dict[str, OperatorSpec]
    streams: dict[str, StreamSpec]
    source: str

    def downstream(self, operator: str) -> list[str]: ...

    def input_streams(self, operator: str) -> dict[str, StreamSpec]: ...

    def to_dict(self) -> dict[str, Any]: ...


def plain_data(value: Any) -> Any:
    """A deep copy with tuples turned into lists (plain YAML data)."""
    if isinstance(value, dict):
        return {k: plain_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_data(v) for v in value]
    return copy.deepcopy(value)
