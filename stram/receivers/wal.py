"""The receiver write-ahead log: blocks and the window that emitted them, on any file system.

With ``RECEIVER_WAL`` on, every block is written here before it is
acknowledged or emitted, and every window records the last block it emitted,
so a redeployed receiver can replay exactly what its windows carried.
"""

from __future__ import annotations

import pickle

from stram.common import fs
from stram.receivers.blocks import Block

__all__ = ["WriteAheadLog"]


#: The index entry naming the newest window that ended empty.
ENDED = "ended"


class WriteAheadLog:
    """One receiver's blocks, and which window emitted them, under a directory URI.

    Layout (every write atomic, through :mod:`stram.common.fs`)::

        <root>/<seq>                        a block: pickle of (seq, items, metadata)
        <root>/windows/<window id>.<seq>    window <window id> emitted blocks up to <seq>
        <root>/windows/ended                the newest window that ended having emitted nothing

    Blocks are emitted in sequence order, so the last sequence number per
    window is the whole mapping: window w emitted the blocks after the
    previous window's last, up to its own.
    """

    def __init__(self, root: str) -> None:
        self.root = root
        self._windows = fs.join(root, "windows")
        #: window id -> index entry names written or found for it
        self._entries: dict[int, list[str]] = {}

    def _block_uri(self, seq: int) -> str:
        return fs.join(self.root, str(seq))

    def write(self, block: Block) -> None:
        """Make a block durable."""
        data = pickle.dumps((block.seq, block.items, block.metadata), protocol=pickle.HIGHEST_PROTOCOL)
        fs.write_atomic(self._block_uri(block.seq), data)

    def read(self, seq: int) -> Block:
        """A block written before (possibly by an earlier container)."""
        stored_seq, items, metadata = pickle.loads(fs.read_bytes(self._block_uri(seq)))
        return Block(stored_seq, items, metadata)

    def remove_partial_writes(self) -> None:
        """Delete temporary files a killed writer left behind (call before writing)."""
        for directory in (self.root, self._windows):
            for info in fs.list_dir(directory):
                if info.base_name.startswith("._tmp-"):
                    fs.delete(fs.join(directory, info.base_name))

    def block_seqs(self) -> list[int]:
        """Sequence numbers of the blocks in the log, ascending."""
        return sorted(int(info.base_name) for info in fs.list_dir(self.root)
                      if info.type == fs.FileType.File and info.base_name.isdigit())

    def record_window(self, window_id: int, last_seq: int) -> None:
        """Window ``window_id`` emits blocks up to ``last_seq`` (written before they are emitted)."""
        name = f"{window_id}.{last_seq}"
        fs.write_atomic(fs.join(self._windows, name), b"")
        self._entries.setdefault(window_id, []).append(name)

    def mark_ended(self, window_id: int) -> None:
        """Window ``window_id`` ended having emitted nothing (``windows/ended`` holds the newest such).

        Replay must repeat an empty window as empty too: downstream may have
        checkpointed past it, so blocks put into it by a replay would be lost.
        """
        fs.write_atomic(fs.join(self._windows, ENDED), str(window_id).encode())

    def ended_window(self) -> int:
        """The newest window marked ended while empty (0 when none)."""
        try:
            return int(fs.read_bytes(fs.join(self._windows, ENDED)).decode() or 0)
        except (OSError, ValueError):
            return 0

    def window_index(self) -> dict[int, int]:
        """Window id -> the last block seq it emitted, from the entries on disk."""
        index: dict[int, int] = {}
        for info in fs.list_dir(self._windows):
            window, dot, seq = info.base_name.partition(".")
            if info.type != fs.FileType.File or not dot or not window.isdigit() or not seq.isdigit():
                continue
            w, s = int(window), int(seq)
            index[w] = max(index.get(w, -1), s)
            self._entries.setdefault(w, []).append(info.base_name)
        return index

    def delete_blocks(self, first: int, last: int) -> None:
        """Delete blocks ``first``..``last`` (those missing already are skipped)."""
        for seq in range(first, last + 1):
            fs.delete(self._block_uri(seq))

    def forget_windows(self, through: int) -> None:
        """Delete the index entries of windows up to ``through``."""
        for window in sorted(w for w in self._entries if w <= through):
            for name in self._entries.pop(window):
                fs.delete(fs.join(self._windows, name))
