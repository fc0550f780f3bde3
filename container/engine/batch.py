"""Batch-at-a-time delivery: the one call that hands an input port a batch of tuples.

The engine moves data in batches (lists). An operator sees them either one
tuple at a time, through its per-tuple handler (``process_<port>(tuple)``, or
the generic ``process(port, tuple)``), or a whole batch at a time, through a
batch handler:

* ``process_<port>_batch(tuples)``, or
* ``process_batch(tuples)`` when the operator has a single input port.

A batch handler gets everything that arrived for the port in one go (on
Arrow streams a list of ``pyarrow.RecordBatch``). The list is shared with
the port's other consumers: read it, do not change it. When an operator
defines both forms, the engine uses the batch form (unless a subclass
overrides only the per-tuple handler: then that one); the per-tuple form stays
for direct callers and tests.
"""

from __future__ import annotations

from typing import Any, Callable

from stram.operator import input_ports

__all__ = ["batch_handler", "has_batch_handler"]


def _defined_in(cls: type, name: str) -> type | None:
    """The class of ``cls``'s MRO whose own body defines ``name``."""
    for klass in cls.__mro__:
        if name in vars(klass):
            return klass
    return None


def _batch_method(operator: Any, port: str) -> Callable[[list], None] | None:
    cls = type(operator)
    name = f"process_{port}_batch"
    method = getattr(operator, name, None)
    if method is None and len(input_ports(cls)) == 1:
        name = "process_batch"
        method = getattr(operator, name, None)
    if method is None:
        return None
    # a subclass that overrides only the per-tuple handler (of a built-in with both) is served per tuple
    tuple_owner = _defined_in(cls, input_ports(cls)[port].handler_name)
    batch_owner = _defined_in(cls, name)
    if tuple_owner is not None and batch_owner is not None and tuple_owner is not batch_owner \
            and issubclass(tuple_owner, batch_owner):
        return None
    return method


def has_batch_handler(operator: Any, port: str) -> bool:
    """Whether ``operator`` takes its input port ``port`` a batch at a time."""
    return _batch_method(operator, port) is not None


def batch_handler(operator: Any, port: str) -> Callable[[list], None]:
    """The function the engine calls with each batch (a list) arriving for ``port``.

    The operator's batch handler itself when it has one, else a loop over the
    batch calling its per-tuple handler.

    Raises
    ------
    TypeError
        The operator handles the port in neither form.
    """
    method = _batch_method(operator, port)
    if method is not None:
        return method
    handler_name = input_ports(type(operator))[port].handler_name
    handler = getattr(operator, handler_name, None)
    if handler is None:
        generic = getattr(operator, "process", None)
        if generic is None:
            raise TypeError(f"{type(operator).__name__} has no method {handler_name}() (or "
                            f"process_{port}_batch()) for its input port '{port}'")

        def each_generic(batch: list, _g: Callable[[str, Any], None] = generic, _p: str = port) -> None:
            for t in batch:
                _g(_p, t)
        return each_generic

    def each(batch: list, _h: Callable[[Any], None] = handler) -> None:
        for t in batch:
            _h(t)
    return each
