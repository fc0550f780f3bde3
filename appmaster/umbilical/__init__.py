"""The umbilical: the gRPC service every container calls (``StreamingContainerUmbilical``).

``server``
    The servicer: each call checked by the token gate, turned into a core event and
    dispatched in batches; the server's TLS and limits.
``front``
    The same service in a process of its own, relaying batches to the master's state
    so that decoding and encoding protobuf leave the master's core to another CPU.
"""
