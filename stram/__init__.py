"""stram: streaming applications on Hadoop YARN, in Python.

The front door for application authors::

    from stram import Operator, InputOperator, InputPort, OutputPort

    class Upper(Operator):
        input = InputPort()
        output = OutputPort()

        def process_input(self, line):
            self.output.emit(line.upper())

Built-in operators to name in a spec (``class: stram.operators.io:LineReader``):
:mod:`stram.operators` (``io``, ``text``, ``aggregate``), :mod:`stram.connectors.kafka`,
:mod:`stram.receivers` and :mod:`stram.spark`.

The rest of the package is stram itself: :mod:`stram.master` (the application
master), :mod:`stram.agent` (the container agent), :mod:`stram.client` (the
``stram`` command), :mod:`stram.common` (the base layer they share) and
:mod:`stram.wire` (the gRPC contract).
"""

from stram.operator import (FatalError, InputOperator, InputPort, Operator, OperatorContext, OutputPort,
                            ShutdownException)

__all__ = ["Operator", "InputOperator", "InputPort", "OutputPort", "OperatorContext", "ShutdownException",
           "FatalError"]
