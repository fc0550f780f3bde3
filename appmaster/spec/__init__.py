"""The application spec: a strict, typed model of a stram YAML spec, validated as a whole.

The package's modules, each importing only those listed before it:

* ``errors`` -- :class:`SpecError`, naming the file, key path and fix;
* ``imports`` -- importing ``"module:Class"`` operator classes and functions;
* ``parts`` -- :class:`PortRef`, :class:`OperatorSpec`, :class:`StreamSpec`,
  the stream localities and codecs;
* ``proptypes`` -- property values checked against their type hints;
* ``yamlio`` -- strict YAML loading (duplicate keys, line and column) and dumping;
* ``build`` -- building a spec from plain data, part by part, then its graph;
* ``overrides`` -- ``-D NAME=VALUE`` overrides;
* ``appspec`` -- :class:`AppSpec`, the whole application: loading, writing, queries.
"""

from stram.master.spec.appspec import AppSpec
from stram.master.spec.errors import SpecError
from stram.master.spec.imports import load_operator_class
from stram.master.spec.parts import CODECS, INLINE_LOCALITIES, LOCALITIES, OperatorSpec, PortRef, StreamSpec

__all__ = [
    "SpecError",
    "PortRef",
    "OperatorSpec",
    "StreamSpec",
    "AppSpec",
    "LOCALITIES",
    "INLINE_LOCALITIES",
    "CODECS",
    "load_operator_class",
]
