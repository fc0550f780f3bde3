"""The clickstream analytics on Spark: page views and distinct users per page per 10 s of event time."""

from __future__ import annotations

from typing import Any

__all__ = ["SCHEMA", "WINDOW", "WATERMARK", "aggregate", "build", "read_output", "summarize"]

#: Spark DDL of the page views the parse step emits.
SCHEMA = "event_time TIMESTAMP, user STRING, page STRING"
#: Tumbling event-time window of the aggregation.
WINDOW = "10 seconds"
#: How late an event may arrive (behind the newest event time seen) and still count.
WATERMARK = "10 seconds"


def aggregate(views: Any, window: str = WINDOW, watermark: str = WATERMARK) -> Any:
    """Page views and distinct users per page per event-time window (append mode ready).

    Parameters
    ----------
    views : pyspark.sql.DataFrame
        Streaming page views with the columns of :data:`SCHEMA`.
    window, watermark : str
        Tumbling window length and allowed lateness (Spark interval strings).

    Returns
    -------
    pyspark.sql.DataFrame
        ``window_start``, ``window_end``, ``page``, ``views``, ``users``; a
        window's rows appear once the watermark passed its end.
    """
    from pyspark.sql import functions as F

    return (views.withWatermark("event_time", watermark)
            .groupBy(F.window("event_time", window), "page")
            .agg(F.count("*").alias("views"), F.size(F.collect_set("user")).alias("users"))
            .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                    "page", "views", "users"))


def build(spark: Any, inputs: dict[str, Any], ctx: Any) -> Any:
    """The SparkPipeline function: the aggregation written as Parquet (file sink, append mode).

    Parameters
    ----------
    spark : pyspark.sql.SparkSession
    inputs : dict
        ``{"input": page views}`` (streaming DataFrame over the stram source).
    ctx : stram.spark.PipelineContext
        Gives ``output_path`` (the operator property) and ``options``
        (``window`` and ``watermark`` override :data:`WINDOW` and
        :data:`WATERMARK`); the operator starts the returned writer with its
        checkpoint location and trigger.

    Returns
    -------
    pyspark.sql.streaming.DataStreamWriter
    """
    if not ctx.output_path:
        raise ValueError("the clickstream pipeline needs the operator property 'output_path'")
    opts = ctx.options or {}
    counts = aggregate(inputs["input"], opts.get("window", WINDOW), opts.get("watermark", WATERMARK))
    return counts.writeStream.format("parquet").outputMode("append").option("path", ctx.output_path)


def read_output(path: str) -> Any:
    """The committed rows under ``path`` as a pandas DataFrame sorted by window and page.

    Reads only what the file sink's log committed (no Spark needed);
    ``window_start``/``window_end`` are UTC timestamps.
    """
    import pandas as pd

    from stram.spark import read_file_sink

    table = read_file_sink(path)
    columns = ["window_start", "window_end", "page", "views", "users"]
    if not table.num_columns:
        return pd.DataFrame(columns=columns)
    df = table.to_pandas()
    for col in ("window_start", "window_end"):
        df[col] = pd.to_datetime(df[col], utc=True)
    df["views"] = df["views"].astype("int64")
    df["users"] = df["users"].astype("int64")
    return df[columns].sort_values(["window_start", "page"]).reset_index(drop=True)


def summarize(path: str, top: int = 10) -> None:
    """Print a summary of the pipeline's Parquet output under ``path``."""
    df = read_output(path)
    if df.empty:
        print(f"no committed output under {path}")
        return
    windows = df["window_start"].nunique()
    print(f"{len(df):,} rows: {windows:,} windows of {WINDOW} from {df['window_start'].min():%Y-%m-%d %H:%M:%S} "
          f"to {df['window_end'].max():%H:%M:%S} UTC, {df['page'].nunique():,} pages, "
          f"{int(df['views'].sum()):,} page views")
    pages = (df.groupby("page").agg(views=("views", "sum"), windows=("window_start", "nunique"),
                                    peak_users=("users", "max"))
             .sort_values(["views", "page"], ascending=[False, True]).head(top))
    print(f"top {min(top, len(pages))} pages by views:")
    print(f"  {'page':<10} {'views':>8} {'windows':>8} {'peak users/window':>18}")
    for page, row in pages.iterrows():
        print(f"  {page:<10} {int(row['views']):>8,} {int(row['windows']):>8,} {int(row['peak_users']):>18,}")
    busiest = df.groupby("window_start")["views"].sum().sort_values(ascending=False).head(1)
    for start, views in busiest.items():
        print(f"busiest window: {start:%H:%M:%S} with {int(views):,} views")
    print(f"output: {path}")
