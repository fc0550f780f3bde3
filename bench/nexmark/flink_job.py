"""One NEXMark query in Flink SQL, run by PyFlink in its own venv (``python -I flink_job.py QUERY DATA OUT ...``).

Streaming mode, parallelism 2 (``--parallelism``), JVM operators only: the data set's Parquet files are
bounded ``filesystem`` sources with ``dateTime`` (epoch ms) as the event time (``rt``, a watermark 4 s
behind, as in the suite), and the result goes to Flink's own ``filesystem`` sink as JSON lines under OUT;
nothing is collected through Python. Windows come out as TIMESTAMP(3) in UTC (the runner reads them
back as epoch ms); ``dateTime`` fields are the source's epoch ms.

The queries follow the suite's nexmark-flink SQL, rewritten where stram.nexmark.oracle's semantics are
stricter and so that every result is append-only over bounded input (the streaming filesystem sink takes
no updates):

- q4/q9: an interval join of each auction with its bids (``B.rt BETWEEN A.rt AND A.rt + the longest
  auction``, ``--max-auction-ms``, plus ``B.dateTime <= A.expires`` and the reserve), then a window on
  the auction's time: q9 keeps the top bid per auction (window Top-N), q4 takes the max per auction
  (window aggregate) and averages per category in one window spanning all time, which fires once at the
  end of input;
- q5/q7: the suite's join of each row with its window's maximum, as window joins (ties kept); q7 joins each
  bid in its own half-open window (a window TVF, not the suite's BETWEEN) and keeps the bid's bidder/price;
- q8: the suite's window join; q11: the SESSION window TVF (Flink merges sessions that touch: gap <=).

This file runs in the peer's venv: it imports nothing from stram.
"""

import argparse
import time

#: the columns of each kind, as in the data set (dateTime/expires are epoch ms)
COLUMNS = {
    "person": "id BIGINT, name STRING, emailAddress STRING, creditCard STRING, city STRING, state STRING, "
              "`dateTime` BIGINT, extra STRING",
    "auction": "id BIGINT, itemName STRING, description STRING, initialBid BIGINT, reserve BIGINT, "
               "`dateTime` BIGINT, expires BIGINT, seller BIGINT, category BIGINT, extra STRING",
    "bid": "auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING, `dateTime` BIGINT, "
           "extra STRING",
}
AUCTION_OUT = ("id BIGINT, itemName STRING, description STRING, initialBid BIGINT, reserve BIGINT, "
               "`dateTime` BIGINT, expires BIGINT, seller BIGINT, category BIGINT, extra STRING")
BID_OUT = "auction BIGINT, bidder BIGINT, price BIGINT, `dateTime` BIGINT, extra STRING"
WINDOW_OUT = "window_start TIMESTAMP(3), window_end TIMESTAMP(3)"
#: one tumbling window that holds every event (aligned to epoch 0): it fires at the end of input
ALL_TIME = "INTERVAL '99999' DAY(5)"

#: the bids that may win their auction (q4/q9): every field of the auction, the bid's, the auction's time
CANDIDATES = """
CREATE TEMPORARY VIEW candidates AS
SELECT A.id, A.itemName, A.description, A.initialBid, A.reserve, A.`dateTime`, A.expires, A.seller, A.category,
       A.extra, A.rt AS a_rt, B.auction, B.bidder, B.price, B.`dateTime` AS bid_dateTime, B.extra AS bid_extra
FROM auction AS A JOIN bid AS B
  ON A.id = B.auction AND B.rt BETWEEN A.rt AND A.rt + INTERVAL '{max_s}' SECOND
WHERE B.`dateTime` <= A.expires AND B.price >= A.reserve
"""

#: bids per auction and sliding window (q5)
HOP_COUNTS = """
CREATE TEMPORARY VIEW hop_counts AS
SELECT auction, COUNT(*) AS num, window_start, window_end
FROM TABLE(HOP(TABLE bid, DESCRIPTOR(rt), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
GROUP BY auction, window_start, window_end
"""

#: query -> (tables read, the sink's columns, extra statements, the INSERT's SELECT)
QUERIES = {
    "q0": (["bid"], BID_OUT, [], "SELECT auction, bidder, price, `dateTime`, extra FROM bid"),
    "q1": (["bid"], "auction BIGINT, bidder BIGINT, price DECIMAL(23, 3), `dateTime` BIGINT, extra STRING", [],
           "SELECT auction, bidder, CAST(price AS DECIMAL(20, 0)) * 0.908, `dateTime`, extra FROM bid"),
    "q2": (["bid"], "auction BIGINT, price BIGINT", [], "SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0"),
    "q3": (["person", "auction"], "name STRING, city STRING, state STRING, id BIGINT", [], """
        SELECT P.name, P.city, P.state, A.id
        FROM auction AS A JOIN person AS P ON A.seller = P.id
        WHERE A.category = 10 AND P.state IN ('OR', 'ID', 'CA')"""),
    "q4": (["auction", "bid"], "id BIGINT, final BIGINT", [CANDIDATES, """
        CREATE TEMPORARY VIEW winning AS
        SELECT id, category, MAX(price) AS final, window_time
        FROM TABLE(TUMBLE(TABLE candidates, DESCRIPTOR(a_rt), INTERVAL '10' SECOND))
        GROUP BY window_start, window_end, window_time, id, category"""], f"""
        SELECT category, AVG(final)
        FROM TABLE(TUMBLE(TABLE winning, DESCRIPTOR(window_time), {ALL_TIME}))
        GROUP BY window_start, window_end, category"""),
    "q5": (["bid"], f"auction BIGINT, num BIGINT, {WINDOW_OUT}", [HOP_COUNTS], """
        SELECT C.auction, C.num, C.window_start, C.window_end
        FROM hop_counts AS C
        JOIN (SELECT MAX(num) AS maxn, window_start, window_end FROM hop_counts
              GROUP BY window_start, window_end) AS M
        ON C.window_start = M.window_start AND C.window_end = M.window_end AND C.num >= M.maxn"""),
    "q7": (["bid"], f"{BID_OUT}, {WINDOW_OUT}", [], """
        SELECT B.auction, B.bidder, B.price, B.`dateTime`, B.extra, B.window_start, B.window_end
        FROM (SELECT * FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(rt), INTERVAL '10' SECOND))) AS B
        JOIN (SELECT MAX(price) AS maxprice, window_start, window_end
              FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(rt), INTERVAL '10' SECOND))
              GROUP BY window_start, window_end) AS M
        ON B.window_start = M.window_start AND B.window_end = M.window_end AND B.price = M.maxprice"""),
    "q8": (["person", "auction"], f"id BIGINT, name STRING, stime TIMESTAMP(3), {WINDOW_OUT}", [], """
        SELECT P.id, P.name, P.window_start, P.window_start, P.window_end
        FROM (SELECT id, name, window_start, window_end
              FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(rt), INTERVAL '10' SECOND))
              GROUP BY id, name, window_start, window_end) AS P
        JOIN (SELECT seller, window_start, window_end
              FROM TABLE(TUMBLE(TABLE auction, DESCRIPTOR(rt), INTERVAL '10' SECOND))
              GROUP BY seller, window_start, window_end) AS A
        ON P.id = A.seller AND P.window_start = A.window_start AND P.window_end = A.window_end"""),
    "q9": (["auction", "bid"], f"{AUCTION_OUT}, auction BIGINT, bidder BIGINT, price BIGINT, bid_dateTime BIGINT, "
           "bid_extra STRING", [CANDIDATES], """
        SELECT id, itemName, description, initialBid, reserve, `dateTime`, expires, seller, category, extra,
               auction, bidder, price, bid_dateTime, bid_extra FROM (
          SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end, id
                                       ORDER BY price DESC, bid_dateTime, bidder, bid_extra) AS rownum
          FROM TABLE(TUMBLE(TABLE candidates, DESCRIPTOR(a_rt), INTERVAL '10' SECOND)))
        WHERE rownum <= 1"""),
    "q11": (["bid"], "bidder BIGINT, bid_count BIGINT, starttime TIMESTAMP(3), endtime TIMESTAMP(3), "
            f"{WINDOW_OUT}", [], """
        SELECT bidder, COUNT(*), window_start, window_end, window_start, window_end
        FROM TABLE(SESSION(TABLE bid PARTITION BY bidder, DESCRIPTOR(rt), INTERVAL '10' SECOND))
        GROUP BY bidder, window_start, window_end"""),
}


def quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def statements(query: str, data: str, out: str, max_auction_ms: int) -> list:
    """The DDL and the INSERT of ``query``, in order."""
    kinds, sink, extra, select = QUERIES[query]
    out_sql = [
        f"CREATE TABLE {kind} ({COLUMNS[kind]}, rt AS TO_TIMESTAMP_LTZ(`dateTime`, 3), "
        f"WATERMARK FOR rt AS rt - INTERVAL '4' SECOND) WITH ('connector' = 'filesystem', "
        f"'path' = {quoted(data + '/' + kind + '.parquet')}, 'format' = 'parquet')" for kind in kinds]
    out_sql.append(f"CREATE TABLE nexmark_result ({sink}) WITH ('connector' = 'filesystem', 'path' = {quoted(out)}, "
                   "'format' = 'json', 'json.encode.decimal-as-plain-number' = 'true')")
    max_s = max(1, -(-max_auction_ms // 1000))
    out_sql += [s.format(max_s=max_s) for s in extra]
    out_sql.append("INSERT INTO nexmark_result " + select)
    return out_sql


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("query", choices=sorted(QUERIES))
    parser.add_argument("data")
    parser.add_argument("out")
    parser.add_argument("--jars", default="", help="jars for the job, separated by ':'")
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--max-auction-ms", type=int, default=0, help="the longest auction (q4/q9's join bound)")
    parser.add_argument("--explain", action="store_true", help="print the plan instead of running")
    args = parser.parse_args()
    from pyflink.table import EnvironmentSettings, TableEnvironment
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    config = env.get_config()
    config.set("parallelism.default", str(args.parallelism))
    config.set("table.local-time-zone", "UTC")
    if args.jars:
        config.set("pipeline.jars", ";".join("file://" + j for j in args.jars.split(":") if j))
    started = time.time()
    sql = statements(args.query, args.data, args.out, args.max_auction_ms)
    for statement in sql[:-1]:
        env.execute_sql(statement)
    if args.explain:
        print(env.explain_sql(sql[-1]))
        return
    env.execute_sql(sql[-1]).wait()
    print(f"flink {args.query}: {time.time() - started:.2f} s")


if __name__ == "__main__":
    main()
