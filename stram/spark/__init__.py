"""Spark integration: the ``stram`` streaming data source and the SparkPipeline operator.

A :class:`SparkPipeline` hosts a PySpark Structured Streaming query inside a
container. Its input streams appear to Spark through the Python streaming data
source registered as format ``stram`` (:class:`StramDataSource`), whose
offsets are window ids. The operator and the source's reader talk through a
*channel*, a directory of small JSON files (:class:`Channel`), because Spark
runs the reader's driver-side methods in its own Python worker processes. The
operator declares the newest window Spark committed its checkpoint, so buffer
servers keep every window Spark has not committed.

The modules, by what runs where:

* ``source`` -- the data source, its stream reader and partitions, and their
  reads from buffer servers (in Spark's Python workers);
* ``batches`` -- tuples as Arrow record batches in the declared schema (in the
  workers, for ``source``);
* ``channel`` -- the channel files, written and read by both sides;
* ``errors`` -- the errors the reads raise, marked so the operator recognizes
  them in a failed query's exception text;
* ``session`` -- the process's SparkSession (in the operator's container);
* ``commitlog`` -- the committed windows in a query's checkpoint (operator);
* ``query`` -- the operator's driver thread: the query started, watched and
  restarted, and the :class:`PipelineContext` of the pipeline function;
* ``pipeline`` -- the :class:`SparkPipeline` operator itself;
* ``filesink`` -- what a Spark file sink committed (for reading the output).

Specs name the operator ``stram.spark:SparkPipeline``; the names below are
importable from this package.
"""

from stram.spark.channel import Channel, latest_window  # noqa: F401 - importable from here too
from stram.spark.commitlog import committed_offsets
from stram.spark.errors import StramReadError, StramSchemaError
from stram.spark.filesink import read_file_sink
from stram.spark.pipeline import SparkPipeline
from stram.spark.query import PipelineContext
from stram.spark.session import get_session
from stram.spark.source import (SOURCE_NAME, StramDataSource, StramPartition, StramStreamReader, probe_end_of_stream,
                                read_partition)

__all__ = [
    "SparkPipeline", "PipelineContext", "StramDataSource", "StramStreamReader", "StramPartition",
    "Channel", "StramSchemaError", "StramReadError", "read_partition", "probe_end_of_stream",
    "committed_offsets", "read_file_sink", "get_session", "SOURCE_NAME",
]
