"""Column-at-a-time text for the NEXMark generator: random words, padding, and Arrow string arrays.

A string column is built as pieces per row (a byte matrix with a [lo, hi) span per row, or a constant),
joined with one boolean-mask gather into an Arrow string buffer; no Python string per row.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from stram.nexmark.model import below, draw, draws

#: shortest random word (before trimming), as in the suite
MIN_WORD = 3
#: one character in this many of a random word is the "special" one (a space, trimmed at the ends)
SPECIAL_ONE_IN = 13

def words(keys: np.ndarray, slot: int, max_length: int, special: bytes = b" ") -> tuple:
    """A random word per event: length 3 .. max_length-1, letters a-z, about one char in 13 ``special``,
    then trimmed of spaces. Uses word slots ``slot`` (length) and ``slot+1 ..`` (characters)."""
    width = max_length - 1
    length = MIN_WORD + below(draw(keys, slot), max_length - MIN_WORD)
    x = below(draws(keys, slot + 1, width), SPECIAL_ONE_IN * 26)
    chars = np.where(x % SPECIAL_ONE_IN == 0, special[0], ord("a") + x // SPECIAL_ONE_IN).astype(np.uint8)
    cols = np.arange(width)
    valid = cols[None, :] < length[:, None]
    solid = valid & (chars != ord(" "))
    lo = np.argmax(solid, axis=1)
    hi = width - np.argmax(solid[:, ::-1], axis=1)
    empty = ~solid.any(axis=1)
    lo[empty] = 0
    hi[empty] = 0
    return chars, lo, hi


def lengths(piece) -> np.ndarray:
    """Characters per row of a piece made by ``words`` or ``window``."""
    _, lo, hi = piece
    return hi - lo


def window(source: np.ndarray, offsets: np.ndarray, size: np.ndarray, width: int) -> tuple:
    """Rows ``source[offsets[i] : offsets[i] + size[i]]`` (size <= width; source padded by width)."""
    view = np.lib.stride_tricks.sliding_window_view(source, width)
    return view[offsets], np.zeros(len(offsets), dtype=np.int64), size


def padding_text(seed: int, length: int = 1 << 20) -> np.ndarray:
    """The seed's pool of lowercase letters that padding strings are cut from."""
    rng = np.random.Generator(np.random.PCG64(seed & 0xFFFFFFFFFFFFFFFF))
    return (ord("a") + rng.integers(0, 26, size=length)).astype(np.uint8)


def padding(keys: np.ndarray, slot: int, pool: np.ndarray, size: np.ndarray) -> tuple:
    """A substring of ``pool`` of length ``size`` per row at a random offset (word slot ``slot``)."""
    width = max(int(size.max(initial=0)), 1)
    start = below(draw(keys, slot), len(pool) - size)
    padded = np.concatenate([pool, pool[:width]])
    return window(padded, start, size, width)


def digits(values: np.ndarray, count: int) -> np.ndarray:
    """Zero-padded decimal digits of ``values`` as an (n x count) byte matrix."""
    powers = 10 ** np.arange(count - 1, -1, -1, dtype=np.int64)
    return (ord("0") + (values[:, None] // powers[None, :]) % 10).astype(np.uint8)


def join(rows: int, pieces: list) -> pa.StringArray:
    """One Arrow string per row: the pieces' spans concatenated in order."""
    mats, masks = [], []
    for piece in pieces:
        if isinstance(piece, bytes):
            if not piece:
                continue
            mats.append(np.broadcast_to(np.frombuffer(piece, dtype=np.uint8), (rows, len(piece))))
            masks.append(np.ones((rows, len(piece)), dtype=bool))
        elif isinstance(piece, np.ndarray):     # a full byte matrix
            mats.append(piece)
            masks.append(np.ones(piece.shape, dtype=bool))
        else:
            mat, lo, hi = piece
            cols = np.arange(mat.shape[1])
            mats.append(mat)
            masks.append((cols[None, :] >= lo[:, None]) & (cols[None, :] < hi[:, None]))
    if not mats:
        return pa.array([""] * rows, type=pa.string())
    big = np.hstack(mats) if len(mats) > 1 else mats[0]
    mask = np.hstack(masks) if len(masks) > 1 else masks[0]
    data = np.ascontiguousarray(big[mask])
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(mask.sum(axis=1), out=offsets[1:])
    return pa.StringArray.from_buffers(rows, pa.py_buffer(offsets), pa.py_buffer(data))


def choose(names: list[str], index: np.ndarray) -> pa.Array:
    """``names[index[i]]`` per row, as an Arrow string array."""
    return pa.array(names, type=pa.string()).take(pa.array(index, type=pa.int64()))
