"""The container agent (``python -m stram.agent``): runs operators in windows and moves their data.

``agent``
    The heartbeat loop: asks the master for its init context, deploys and undeploys
    operators, applies the master's answers.
``umbilical``
    The gRPC client of the master and its retry policy.
``engine``
    Running operators: nodes, windows, checkpoints, sinks, queues, codecs.
``bufferserver``
    Each container's store of its published streams, served to subscribers over TCP.

The agent imports :mod:`stram.common`, :mod:`stram.wire` and the operator API, never the master.
"""
