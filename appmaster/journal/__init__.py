"""The master's journal under ``APP_PATH/journal``: what a new master attempt resumes from.

``document``
    The bytes and the file of the master's state's versioned JSON document (encode, decode, write,
    read); the document itself is the core's (:mod:`stram.master.core.statedoc`).
``log``
    The snapshot plus an append-only log of what changed; replay and compaction.
``compactor``
    The process that folds a snapshot and its log into the next snapshot.

The journal imports the core (the plan and its change trackers, the state's document); the core
never imports the journal.
"""
