"""The wheels a vLLM release needs on the H200 machine beyond what its image already has (docs/vllm.md).

Run HERE (PyPI reachable), never on the GPU machine:
  python benchmarks/h200/vllm/closure.py --root vllm==0.26.0 [--skip NAME ...] [--out FILE]

pip's own resolver decides, as if the image's packages were installed: every package of the image
(image-pip-freeze.txt, `pip list --format=freeze` on that machine) is offered as an empty stand-in wheel of
its exact version with a local label (`2.11.0+image`: it matches `==2.11.0`) and no requirements, and pinned
to it by a constraint; `pip install --dry-run --report` then resolves the root for CPython 3.12
manylinux_2_39..2_17 x86_64 wheels. What it picks that is not a stand-in has to be brought. A requirement the
image's version does not meet (CONFLICTS) is resolved against a stand-in of the version asked for, and the
image's copy stays on the machine (the bundle installs with --no-deps); the output says so. `--skip NAME`
offers NAME as a stand-in too: left out, with what only it needs (the lean set of what `vllm serve` imports).
The output is one line per wheel to bring, `name==version  wheel  sha256  required-by`, then `# image`,
`# conflict` and `# skipped` comments; tests/test_vllm_bundle.py checks it against the freeze file."""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

HERE = Path(__file__).resolve().parent
FREEZE = HERE / "image-pip-freeze.txt"
GLIBC = (39, 38, 37, 36, 35, 34, 33, 32, 31, 30, 29, 28, 27, 26, 25, 24, 17)
PLATFORM_ARGS = ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp",
                 *[a for n in GLIBC for a in ("--platform", f"manylinux_2_{n}_x86_64")],
                 "--platform", "manylinux2014_x86_64", "--platform", "manylinux1_x86_64",
                 "--platform", "linux_x86_64"]
# The image's versions that vLLM 0.26.0 asks otherwise: resolved against the version asked for, the image's
# copy kept. numba: vLLM pins 0.65.0 for its n-gram proposer (not imported by the EAGLE-3 path), 0.65's
# llvmlite would replace the image's; setuptools: vLLM asks <81 (the image has 81.0.0), used by its
# build-time helpers only; protobuf: nvidia-cutlass-dsl asks <7 (the image has 7.36.2), and is not brought;
# numpy: mistral-common asks <2.4 on Python 3.12 (the image has 2.5.2; torch and the rest are built on it);
# cuda-core: nvidia-cutlass-dsl's cuda-python 13.3.1 asks ~=1.0.0 (the image has 1.2.0).
CONFLICTS = {"numba": "0.65.0", "setuptools": "80.9.0", "protobuf": "6.33.5", "numpy": "2.3.5",
             "cuda-core": "1.0.0"}
LOCAL = "image"
TARGET_ENV = dict(default_environment(), python_version="3.12", python_full_version="3.12.3",
                  implementation_version="3.12.3", platform_machine="x86_64", sys_platform="linux",
                  platform_system="Linux", os_name="posix", implementation_name="cpython",
                  platform_python_implementation="CPython")


def read_freeze(path: Path = FREEZE) -> dict[str, str]:
    """canonical name -> version of every package the image has (the header lines are not `name==version`)."""
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line.strip())
        if m:
            out[canonicalize_name(m.group(1))] = m.group(2)
    return out


def stand_in_wheel(folder: Path, name: str, version: str) -> Path:
    """An empty wheel `name==version` with no requirements (what pip resolves against instead of the
    image's)."""
    dist = re.sub(r"[-.]+", "_", name)
    info = f"{dist}-{version}.dist-info"
    files = {f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: closure.py\nRoot-Is-Purelib: true\n"
                              "Tag: py3-none-any\n"}
    record = []
    for n, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{n},sha256={digest},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for n, text in files.items():
            z.writestr(n, text)
    return path


def resolve(root: str, offered: dict[str, str], work: Path) -> dict:
    """pip's report (`pip install --dry-run --report`) for `root` with `offered` (name -> version) as
    stand-ins."""
    fake = work / "stand-ins"
    fake.mkdir(parents=True, exist_ok=True)
    pins = []
    for name, version in offered.items():
        v = f"{Version(version).public}+{LOCAL}"
        stand_in_wheel(fake, name, v)
        pins.append(f"{name}=={v}")
    (work / "constraints.txt").write_text("\n".join(pins) + "\n")
    report = work / "report.json"
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--report",
           str(report), *PLATFORM_ARGS, "--target", str(work / "none"), "--find-links", str(fake),
           "-c", str(work / "constraints.txt"), root]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        text = res.stdout + res.stderr
        err = text[text.find("The conflict is caused by"):] if "The conflict is caused by" in text else text
        (work / "pip.log").write_text(text)
        raise SystemExit(f"pip could not resolve {root} against the image:\n{err[:3000]}")
    return json.loads(report.read_text())


def closure_lines(report: dict, image: dict[str, str], skip: set[str]) -> tuple[list[str], list[str]]:
    """(the wheels to bring, the comment lines) from pip's report."""
    bring, notes, by = [], [], {}
    picked = {canonicalize_name(i["metadata"]["name"]): i for i in report["install"]}
    for name, item in picked.items():  # who needs what, with the markers of the target and the extras asked
        extras = set(item.get("requested_extras") or []) | {""}
        for text in item["metadata"].get("requires_dist") or []:
            r = Requirement(text)
            if r.marker is None or any(r.marker.evaluate(dict(TARGET_ENV, extra=e)) for e in extras):
                by.setdefault(canonicalize_name(r.name), set()).add(name)
    for name in sorted(picked):
        item = picked[name]
        version = Version(item["metadata"]["version"])
        if version.local == LOCAL:
            continue
        info = item["download_info"]
        sha = info.get("archive_info", {}).get("hashes", {}).get("sha256") or "-"
        wheel = info["url"].rsplit("/", 1)[-1]
        needed_by = ",".join(sorted(by.get(name, ["(an extra)"])))
        bring.append(f"{name}=={version}  {wheel}  {sha}  required-by: {needed_by}")
    for name in sorted(picked):
        if Version(picked[name]["metadata"]["version"]).local != LOCAL:
            continue
        who = ",".join(sorted(by.get(name, ["(an extra)"])))
        if name in skip:
            notes.append(f"# skipped {name} (required by {who})")
        elif name in CONFLICTS:
            notes.append(f"# conflict {name}=={image.get(name)} (image) kept; "
                         f"resolved as =={CONFLICTS[name]} (required by {who})")
        else:
            notes.append(f"# image {name}=={image[name]} (required by {who})")
    return bring, notes


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--root", default="vllm==0.26.0")
    ap.add_argument("--freeze", type=Path, default=FREEZE)
    ap.add_argument("--skip", nargs="*", default=[], help="packages left out, with what only they need")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    image = read_freeze(a.freeze)
    skip = {canonicalize_name(s) for s in a.skip}
    offered = dict(image, **CONFLICTS)
    with tempfile.TemporaryDirectory() as tmp:
        report = resolve(a.root, offered, Path(tmp) / "full")
        # a skipped package is offered at the version the full closure took, then pip drops its needs
        if skip:
            full = {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"]
                    for i in report["install"]}
            unknown = skip - set(full)
            if unknown:
                raise SystemExit(f"--skip {' '.join(sorted(unknown))}: not in the closure of {a.root}")
            report = resolve(a.root, dict(offered, **{n: full[n] for n in skip}), Path(tmp) / "lean")
    bring, notes = closure_lines(report, image, skip)
    head = [f"# {a.root}: what the image ({a.freeze.name}) lacks, "
            "resolved by pip for CPython 3.12 manylinux x86_64",
            f"# {len(bring)} wheels; skipped: {' '.join(sorted(skip)) or '-'}"]
    text = "\n".join(head + bring + notes) + "\n"
    if a.out:
        a.out.write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
