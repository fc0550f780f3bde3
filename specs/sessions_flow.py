"""The sessions example (specs/sessions.yaml) written in Python with the dataflow API.

Click events in event time (5 s disorder), counted per user session (30 s gap) in two partitions;
clicks too late for their session go to their own output. Launch: stram launch specs/sessions_flow.py
(output under out/sessions/ and out/sessions-late/ of the directory you launch from);
stram launch --print-dag specs/sessions_flow.py shows the DAG: the same as the YAML file's.
"""

from stram.flow import Flow, windows

flow = Flow("sessions", attributes={"STREAMING_WINDOW_SIZE_MILLIS": 200, "CHECKPOINT_WINDOW_COUNT": 5,
                                    "PROCESSING_MODE": "EXACTLY_ONCE"})
clicks = flow.read_jsonl("specs/data/clicks.jsonl", timestamp_field="ts", out_of_orderness_ms=5000,
                         records_per_window=100, name="clicks")
sessions = clicks.key_by("user").window(windows.session(30_000)).count(name="sessions", partitions=2)
sessions.write_jsonl("out/sessions", name="out")
sessions.late.write_jsonl("out/sessions-late", name="late")
