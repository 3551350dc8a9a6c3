"""Repack a wheel for one H200 (sm_90): leave out members, and keep in its CUDA libraries only the device code
an sm_90 GPU can run (docs/vllm.md, "Real vLLM on the H200").

  python strip_wheel.py SRC DST [--drop PATTERN ...] [--sm90 PATTERN ...]

--drop: members (fnmatch patterns) left out of DST.
--sm90: shared libraries whose `.nv_fatbin` section is thinned in place: in every fatbin container, each
  entry that an sm_90 device never loads has its payload zeroed (its header, the container's layout and the
  ELF file's size stay as they are, so every offset the library holds still points where it did; the zeroes
  compress to nothing). An sm_90 device loads an `sm_90` cubin when the container has one (a cubin of another
  major version never runs on it), else JIT-compiles the newest PTX of compute capability 9.0 or lower. So:
  cubins of any other arch go; PTX goes where the container has an sm_90 cubin, and PTX newer than 9.0 goes
  everywhere; a container with nothing for sm_90 keeps nothing (its kernels cannot run there either way).
RECORD is rewritten with the new hashes. Prints what it did, sizes in bytes.
"""

from __future__ import annotations

import argparse
import base64
import csv
import fnmatch
import hashlib
import io
import os
import struct
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass

FATBIN_MAGIC = 0xBA55ED50
KIND_PTX, KIND_ELF = 1, 2
ARCH = 90


@dataclass(frozen=True)
class Entry:
    container: int  # offset of its container's header in the file
    offset: int  # offset of the entry's header
    header_size: int
    payload_size: int  # padded, as laid out
    kind: int  # 1 PTX, 2 cubin (ELF)
    arch: int  # e.g. 90 for sm_90 / compute_90 (also sm_90a)


def fatbin_section(data: bytes) -> tuple[int, int] | None:
    """(file offset, size) of the ELF's `.nv_fatbin` section, None when it has none."""
    if data[:4] != b"\x7fELF" or data[4] != 2:  # 64-bit ELF only
        return None
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab = headers[shstrndx][4]
    for h in headers:
        start = strtab + h[0]
        if data[start:data.index(b"\0", start)] == b".nv_fatbin":
            return h[4], h[5]
    return None


def fatbin_entries(data: bytes, offset: int, size: int) -> Iterator[Entry]:
    """Every entry of every fatbin container in [offset, offset + size)."""
    end, p = offset + size, offset
    while p + 16 <= end:
        magic, _version, header_size, fat_size = struct.unpack_from("<IHHQ", data, p)
        if magic != FATBIN_MAGIC:  # alignment padding between containers
            p += 8
            continue
        q, stop = p + header_size, p + header_size + fat_size
        while q < stop:
            kind, _v, ehs, padded = struct.unpack_from("<HHII", data, q)
            arch = struct.unpack_from("<I", data, q + 28)[0]
            if ehs == 0 or q + ehs + padded > stop:
                raise ValueError(f"malformed fatbin entry at {q:#x}")
            yield Entry(p, q, ehs, padded, kind, arch)
            q += ehs + padded
        p = stop


def unused_on_sm90(entries: list[Entry]) -> list[Entry]:
    """The entries of one library that an sm_90 device never loads."""
    by_container: dict[int, list[Entry]] = {}
    for e in entries:
        by_container.setdefault(e.container, []).append(e)
    drop = []
    for group in by_container.values():
        has_cubin = any(e.kind == KIND_ELF and e.arch == ARCH for e in group)
        ptx = [e.arch for e in group if e.kind == KIND_PTX and e.arch <= ARCH]
        best_ptx = max(ptx) if ptx and not has_cubin else None
        for e in group:
            keep = (e.kind == KIND_ELF and e.arch == ARCH) or (e.kind == KIND_PTX and e.arch == best_ptx)
            if not keep:
                drop.append(e)
    return drop


def thin_to_sm90(data: bytes) -> tuple[bytes, int]:
    """(the library with unused device code zeroed, bytes zeroed)."""
    sec = fatbin_section(data)
    if sec is None:
        return data, 0
    out = bytearray(data)
    zeroed = 0
    for e in unused_on_sm90(list(fatbin_entries(data, *sec))):
        start = e.offset + e.header_size
        out[start:start + e.payload_size] = bytes(e.payload_size)
        zeroed += e.payload_size
    return bytes(out), zeroed


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def repack(src: str, dst: str, drop: list[str], sm90: list[str]) -> dict[str, int]:
    zin = zipfile.ZipFile(src)
    names = zin.namelist()
    rec = next(n for n in names if n.endswith(".dist-info/RECORD"))
    keep = [n for n in names if n != rec and not any(fnmatch.fnmatch(n, p) for p in drop)]
    zeroed = 0
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zout:
        rows = []
        for n in keep:
            data = zin.read(n)
            if any(fnmatch.fnmatch(n, p) for p in sm90):
                data, z = thin_to_sm90(data)
                zeroed += z
            zout.writestr(zin.getinfo(n), data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
            rows.append((n, record_hash(data), str(len(data))))
        rows.append((rec, "", ""))
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(rows)
        zout.writestr(rec, buf.getvalue())
    return {"members": len(names), "kept": len(keep) + 1, "zeroed": zeroed,
            "src_bytes": os.path.getsize(src), "dst_bytes": os.path.getsize(dst)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--drop", nargs="*", default=[])
    ap.add_argument("--sm90", nargs="*", default=[])
    a = ap.parse_args(argv)
    r = repack(a.src, a.dst, a.drop, a.sm90)
    print(f"{os.path.basename(a.src)}: {r['members']} -> {r['kept']} members, "
          f"{r['zeroed']} bytes of device code zeroed; {r['src_bytes']} -> {r['dst_bytes']} bytes")


if __name__ == "__main__":
    main()
