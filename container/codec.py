"""Stream codecs: how a batch of tuples becomes the bytes of one PAYLOAD frame."""

from __future__ import annotations

import pickle
import struct
from typing import Any, ClassVar

__all__ = ["Codec", "PickleCodec", "ArrowCodec", "get_codec", "CODECS"]


class Codec:
    """Turns a batch of tuples into bytes and back.

    A codec always works on a whole batch (a list of tuples) at once: one call
    per frame keeps the per-tuple cost in C, which is what makes a Python
    stream fast. Codecs are stateless and safe to share between threads.
    """

    #: Name used in stream attributes (``codec: arrow``).
    name: ClassVar[str] = ""

    def encode(self, tuples: list) -> bytes | memoryview:
        """Encode a batch.

        Parameters
        ----------
        tuples : list
            The tuples of one batch, in order.

        Returns
        -------
        bytes or memoryview
            The encoded batch, opaque to the buffer server: ``bytes``, or a read-only
            ``memoryview`` of memory nothing changes afterwards (a ``pyarrow.Buffer``), which
            the buffer server keeps by reference.
        """
        raise NotImplementedError

    def decode(self, data: bytes) -> list:
        """Decode what :meth:`encode` produced.

        Parameters
        ----------
        data : bytes-like
            One encoded batch.

        Returns
        -------
        list
            The tuples, in the order they were encoded.
        """
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class PickleCodec(Codec):
    """Pickle protocol 5 of the whole list in one call (the default codec)."""

    name: ClassVar[str] = "pickle"

    def encode(self, tuples: list) -> bytes:
        return pickle.dumps(tuples, protocol=5)

    def decode(self, data: bytes) -> list:
        return pickle.loads(data)


_MIXED_MAGIC = b"STRAMIPC"
_U32 = struct.Struct(">I")


class ArrowCodec(Codec):
    """Arrow IPC stream format for tuples that are ``pyarrow.RecordBatch`` objects.

    A batch whose record batches all share one schema is encoded as a single,
    standard Arrow IPC stream (readable by any Arrow implementation). When the
    schema changes inside a batch, each run of equal schemas becomes its own
    IPC stream and the streams are concatenated behind the 8-byte marker
    ``STRAMIPC``, each preceded by its 4-byte big-endian length (an IPC stream
    itself always starts with ``0xFFFFFFFF``, so the two never collide).
    ``pyarrow.Table`` items are accepted and sent as their record batches.
    Encoding writes each stream once into a buffer of its exact size (measured by a
    first pass that copies nothing) from Arrow's memory pool, and returns a read-only
    ``memoryview`` of it: no buffer grows and is copied as it is written, and no copy
    into ``bytes`` follows. Decoding is zero-copy: the returned batches point into
    ``data``. An empty list encodes to ``b""``.
    """

    name: ClassVar[str] = "arrow"

    def __init__(self) -> None:
        import pyarrow  # noqa: F401  (fail early with a clear ImportError)

    @staticmethod
    def _one_stream(batches: list) -> Any:
        """One IPC stream of ``batches`` (one schema) in a ``pyarrow.Buffer`` of its size."""
        import pyarrow as pa

        schema = batches[0].schema
        measure = pa.MockOutputStream()  # sizes only: the data is not copied
        with pa.ipc.new_stream(measure, schema) as writer:
            for batch in batches:
                writer.write_batch(batch)
        buf = pa.allocate_buffer(measure.size())
        with pa.ipc.new_stream(pa.FixedSizeBufferWriter(buf), schema) as writer:
            for batch in batches:
                writer.write_batch(batch)
        return buf

    def encode(self, tuples: list) -> bytes | memoryview:
        import pyarrow as pa

        batches: list = []
        for item in tuples:
            if isinstance(item, pa.RecordBatch):
                batches.append(item)
            elif isinstance(item, pa.Table):
                batches.extend(item.to_batches())
            else:
                raise TypeError(
                    f"arrow codec takes pyarrow.RecordBatch tuples, got {type(item).__name__}")
        if not batches:
            return b""
        runs: list[list] = [[batches[0]]]
        for batch in batches[1:]:
            if batch.schema.equals(runs[-1][0].schema, check_metadata=True):
                runs[-1].append(batch)
            else:
                runs.append([batch])
        if len(runs) == 1:
            return memoryview(self._one_stream(runs[0])).toreadonly()  # written once, kept by reference
        parts = [_MIXED_MAGIC]
        for run in runs:
            buf = self._one_stream(run)
            parts.append(_U32.pack(buf.size))
            parts.append(buf.to_pybytes())
        return b"".join(parts)

    def decode(self, data: bytes) -> list:
        import pyarrow as pa

        if not len(data):
            return []
        buf = pa.py_buffer(data)
        if bytes(buf[:len(_MIXED_MAGIC)]) != _MIXED_MAGIC:
            return list(pa.ipc.open_stream(buf))
        out: list = []
        pos = len(_MIXED_MAGIC)
        while pos < buf.size:
            (size,) = _U32.unpack(bytes(buf[pos:pos + 4]))
            pos += 4
            if pos + size > buf.size:
                raise ValueError("truncated arrow batch: stream extends past the end of the data")
            out.extend(pa.ipc.open_stream(buf.slice(pos, size)))
            pos += size
        return out


#: Codec classes by name.
CODECS: dict[str, type[Codec]] = {"arrow": ArrowCodec, "pickle": PickleCodec}


def get_codec(name: str) -> Codec:
    """Return a codec by its stream-attribute name.

    Parameters
    ----------
    name : str
        ``"pickle"`` (the default of every stream) or ``"arrow"``.

    Returns
    -------
    Codec

    Raises
    ------
    ValueError
        For an unknown name, listing the known ones.
    """
    try:
        cls = CODECS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown stream codec {name!r}; known: {', '.join(sorted(CODECS))}") from None
    return cls()
