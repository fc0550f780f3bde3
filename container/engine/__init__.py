"""The engine: deployed operators run in numbered streaming windows.

``node``
    :class:`~.node.Node` and the :class:`~.node.Engine`: window generation and alignment,
    streams, checkpoints.
``messages``
    The data plane's message kinds and what a queued message weighs.
``streams``
    Both sides of a stream: where an output port's batches go (direct calls, a node's queue,
    the buffer server) and how a remote input is fed from its subscription.
``inbox``, ``batch``
    A node's bounded input queue; batch-at-a-time delivery to input ports.
``codec``
    How a batch of tuples becomes the bytes of one frame (pickle, JSON, Arrow).
``heap``
    The C heap's tuning for big frames.
"""
