"""The dataflow API: an application written in Python, compiled to the DAG a YAML spec describes.

::

    from stram.flow import Flow, windows

    flow = Flow("bids", attributes={"STREAMING_WINDOW_SIZE_MILLIS": 200, "PROCESSING_MODE": "EXACTLY_ONCE"})
    bids = flow.read_jsonl("data/bids", timestamp_field="dateTime", out_of_orderness_ms=5000)
    counts = bids.key_by("auction").window(windows.tumbling(10_000)).count()
    counts.write_jsonl("out/counts")
    counts.late.write_jsonl("out/late")

Every method adds one operator; ``stram launch app.py`` runs the file, takes
the Flow it defines and launches it as it launches a YAML spec. The modules:
``windows`` (window kinds), ``graph`` (steps, naming, compiling), ``stream``
(the stream methods), ``flow`` (:class:`Flow` and its sources), ``loader``
(running an app file), ``ops`` (the operators the generic steps run).
"""

from stram.flow import windows
from stram.flow.errors import FlowError
from stram.flow.flow import Flow
from stram.flow.loader import load_flow
from stram.flow.stream import KeyedStream, Stream, WindowedStream

__all__ = ["Flow", "Stream", "KeyedStream", "WindowedStream", "FlowError", "windows", "load_flow"]
