"""harness.common.safetensors_io against the reference `safetensors` package (installed for tests only)."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import save_file

from harness.common.safetensors_io import (
    SafetensorsError,
    header_length,
    parse_header,
    read_header,
    read_metadata,
    write_safetensors,
)


def test_reader_matches_reference_writer(tmp_path):
    path = tmp_path / "ref.safetensors"
    arrays = {
        "fc.weight": np.arange(24, dtype=np.float16).reshape(4, 6),
        "d2t": np.array([0, 3, 7], dtype=np.int64),
        "t2d": np.array([True, False, True, True]),
        "norm.weight": np.ones(5, dtype=np.float32),
    }
    save_file(arrays, str(path), metadata={"format": "pt"})
    header = read_header(path)
    assert set(header) == set(arrays)
    expected_dtype = {"fc.weight": "F16", "d2t": "I64", "t2d": "BOOL", "norm.weight": "F32"}
    raw = path.read_bytes()
    base = 8 + header_length(raw[:8])
    for name, arr in arrays.items():
        info = header[name]
        assert info.dtype == expected_dtype[name]
        assert info.shape == arr.shape
        begin, end = info.offsets
        assert raw[base + begin : base + end] == arr.tobytes()
    assert read_metadata(path) == {"format": "pt"}


def test_reader_needs_only_the_header_bytes(tmp_path):
    path = tmp_path / "h.safetensors"
    save_file({"w": np.zeros((3, 2), dtype=np.float32)}, str(path))
    raw = path.read_bytes()
    prefix = raw[: 8 + header_length(raw[:8])]
    assert read_header(prefix) == read_header(path)
    assert read_header(prefix)["w"].shape == (3, 2)


def test_writer_output_loads_in_reference_reader(tmp_path):
    path = tmp_path / "mine.safetensors"
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    ids = np.array([5, 9], dtype=np.int64)
    write_safetensors(
        path,
        {
            "w": ("F32", (2, 3), w.tobytes()),
            "ids": ("I64", (2,), ids.tobytes()),
            "mask": ("BOOL", (3,), bytes([1, 0, 1])),
        },
        metadata={"k": "v"},
    )
    with safe_open(str(path), framework="numpy") as f:
        assert sorted(f.keys()) == ["ids", "mask", "w"]
        assert f.metadata() == {"k": "v"}
        np.testing.assert_array_equal(f.get_tensor("w"), w)
        np.testing.assert_array_equal(f.get_tensor("ids"), ids)
        np.testing.assert_array_equal(f.get_tensor("mask"), np.array([True, False, True]))
    assert (8 + header_length(path.read_bytes()[:8])) % 8 == 0  # buffer starts 8-byte aligned


def test_writer_rejects_wrong_byte_count(tmp_path):
    with pytest.raises(ValueError, match="needs 24"):
        write_safetensors(tmp_path / "x.safetensors", {"w": ("F32", (2, 3), b"\x00" * 20)})


def _hdr(text: bytes) -> bytes:
    return struct.pack("<Q", len(text)) + text


@pytest.mark.parametrize(
    "blob, message",
    [
        (b"\x01\x02", "need 8 bytes"),
        (struct.pack("<Q", 10**12), "implausible header length"),
        (struct.pack("<Q", 40) + b"{}", "truncated header"),
        (_hdr(b"nope"), "not UTF-8 JSON"),
        (_hdr(b"[1, 2]"), "not an object"),
        (_hdr(b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}'), "do not match"),
        (_hdr(b'{"w":{"dtype":"Q9","shape":[2],"data_offsets":[0,8]}}'), "unknown dtype"),
        (_hdr(b'{"w":{"dtype":"F32"}}'), "bad entry"),
    ],
)
def test_malformed_headers_raise(blob, message):
    with pytest.raises(SafetensorsError, match=message):
        parse_header(blob)
