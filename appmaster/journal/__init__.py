"""The master's journal under ``APP_PATH/journal``: what a new master attempt resumes from.

``document``
    The versioned JSON document of the master's state (encode, decode, its errors).
``log``
    The snapshot plus an append-only log of what changed; replay and compaction.
``compactor``
    The process that folds a snapshot and its log into the next snapshot.

The journal reads the core's plan; the core never imports the journal.
"""
