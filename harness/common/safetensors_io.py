"""Pure-python safetensors header reader and a tiny writer (no torch, no numpy).

Format (https://github.com/huggingface/safetensors): 8-byte little-endian header length N, then N bytes of
UTF-8 JSON ``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}``, then the
data buffer. Offsets are relative to the start of the buffer. The reader needs only the first 8+N bytes,
so a preflight check can fetch a header over SSH without copying the weights.
"""

from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path
from typing import NamedTuple

# Bytes per element for every dtype the format defines.
DTYPE_SIZES: dict[str, float] = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "F8_E8M0": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
    "F4": 0.5,
    "F6_E2M3": 0.75,
    "F6_E3M2": 0.75,
}
# The format caps the header at 100 MB; anything larger is not a safetensors file.
MAX_HEADER_BYTES = 100_000_000


class TensorInfo(NamedTuple):
    dtype: str
    shape: tuple[int, ...]
    offsets: tuple[int, int]


class SafetensorsError(ValueError):
    """The bytes are not a well-formed safetensors header."""


def header_length(prefix: bytes) -> int:
    """Header length N from the first 8 bytes of a file (so callers know how many bytes to fetch)."""
    if len(prefix) < 8:
        raise SafetensorsError(f"need 8 bytes for the header length, got {len(prefix)}")
    (n,) = struct.unpack("<Q", prefix[:8])
    if n <= 1 or n > MAX_HEADER_BYTES:
        raise SafetensorsError(f"implausible header length {n}")
    return n


def parse_header(blob: bytes) -> tuple[dict[str, TensorInfo], dict[str, str]]:
    """Parse 8+N header bytes (more may follow) into (tensors, metadata)."""
    n = header_length(blob)
    if len(blob) < 8 + n:
        raise SafetensorsError(f"truncated header: need {8 + n} bytes, got {len(blob)}")
    try:
        raw = json.loads(blob[8 : 8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"header is not UTF-8 JSON: {e}") from e
    if not isinstance(raw, dict):
        raise SafetensorsError("header JSON is not an object")
    metadata = raw.pop("__metadata__", None) or {}
    tensors: dict[str, TensorInfo] = {}
    for name, entry in raw.items():
        try:
            dtype, shape, offs = entry["dtype"], entry["shape"], entry["data_offsets"]
            info = TensorInfo(str(dtype), tuple(int(d) for d in shape), (int(offs[0]), int(offs[1])))
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise SafetensorsError(f"bad entry for tensor {name!r}: {entry!r}") from e
        if info.dtype not in DTYPE_SIZES:
            raise SafetensorsError(f"tensor {name!r}: unknown dtype {info.dtype!r}")
        if info.offsets[1] - info.offsets[0] != tensor_nbytes(info.dtype, info.shape):
            raise SafetensorsError(
                f"tensor {name!r}: data_offsets {info.offsets} do not match {info.dtype}{list(info.shape)}"
            )
        tensors[name] = info
    return tensors, metadata


def read_header(source: str | os.PathLike[str] | bytes) -> dict[str, TensorInfo]:
    """Tensor table of a file path (reads only 8+N bytes) or of the leading bytes of one."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return parse_header(bytes(source))[0]
    with open(source, "rb") as f:
        prefix = f.read(8)
        n = header_length(prefix)
        return parse_header(prefix + f.read(n))[0]


def read_metadata(source: str | os.PathLike[str] | bytes) -> dict[str, str]:
    """The optional ``__metadata__`` string map."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return parse_header(bytes(source))[1]
    with open(source, "rb") as f:
        prefix = f.read(8)
        return parse_header(prefix + f.read(header_length(prefix)))[1]


def tensor_nbytes(dtype: str, shape: tuple[int, ...] | list[int]) -> int:
    return math.ceil(math.prod(shape) * DTYPE_SIZES[dtype])


def write_safetensors(
    path: str | os.PathLike[str],
    tensors: dict[str, tuple[str, tuple[int, ...] | list[int], bytes]],
    metadata: dict[str, str] | None = None,
) -> None:
    """Write ``{name: (dtype, shape, raw little-endian bytes)}`` as a safetensors file."""
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    # The format requires tensors laid out in the buffer in header order; sort like the reference writer.
    names = sorted(tensors)
    for name in names:
        dtype, shape, data = tensors[name]
        if dtype not in DTYPE_SIZES:
            raise ValueError(f"tensor {name!r}: unknown dtype {dtype!r}")
        expected = tensor_nbytes(dtype, shape)
        if len(data) != expected:
            raise ValueError(
                f"tensor {name!r}: {len(data)} bytes given, {dtype}{list(shape)} needs {expected}"
            )
        header[name] = {
            "dtype": dtype,
            "shape": [int(d) for d in shape],
            "data_offsets": [offset, offset + expected],
        }
        offset += expected
    blob = json.dumps(header, separators=(",", ":")).encode("utf-8")
    blob += b" " * (-len(blob) % 8)  # 8-byte alignment of the buffer, as the reference writer pads
    with open(Path(path), "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for name in names:
            f.write(tensors[name][2])
