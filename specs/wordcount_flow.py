"""Word count written in Python with the dataflow API (stram.flow); the same job as specs/wordcount.yaml.

Launch: stram launch specs/wordcount_flow.py (output under out/wordcount-flow/ of the directory you launch
from); stram launch --print-dag specs/wordcount_flow.py shows the operators it compiles to.
"""

import re

from stram.flow import Flow

WORD = re.compile(r"[a-z0-9]+")


def words_of(line):
    return WORD.findall(line.lower())


flow = Flow("wordcount-flow", attributes={"STREAMING_WINDOW_SIZE_MILLIS": 200, "CHECKPOINT_WINDOW_COUNT": 10,
                                          "PROCESSING_MODE": "EXACTLY_ONCE"})
words = flow.read_lines("specs/data/words.txt", lines_per_window=200, name="reader")
counts = words.flat_map(words_of, name="split", locality="CONTAINER_LOCAL") \
    .key_by(lambda word: word) \
    .fold(0, lambda n, _: n + 1, name="count", partitions=2)
counts.write_jsonl("out/wordcount-flow", name="out")
