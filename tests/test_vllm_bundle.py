"""Bringing vLLM to the H200 (benchmarks/h200/vllm.sh, docs/vllm.md): the closure lists are what the
image's pip freeze lacks, the parts rejoin to the same bytes, the wheel stripper keeps exactly the device
code an sm_90 loads, the script's stages parse and are wired, and what it passes to `vllm serve` is vLLM
0.26.0's."""

from __future__ import annotations

import re
import shlex
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
H = ROOT / "benchmarks" / "h200"
sys.path.insert(0, str(H / "vllm"))
import closure  # noqa: E402
import make_vllm_plan  # noqa: E402
import strip_wheel  # noqa: E402

from harness.engines.vllm import launch, serve_check  # noqa: E402
from harness.inputs.config import load_plan  # noqa: E402

SCRIPT = H / "vllm.sh"


def _closure(name: str) -> tuple[dict[str, tuple[str, str, str]], list[str]]:
    """name -> (version, wheel, sha256) of the wheels to bring, and the comment lines."""
    wheels, notes = {}, []
    for line in (H / "vllm" / name).read_text().splitlines():
        if line.startswith("#"):
            notes.append(line)
            continue
        spec, wheel, sha, _by = line.split(None, 3)
        n, v = spec.split("==")
        wheels[canonicalize_name(n)] = (v, wheel, sha)
    return wheels, notes


def test_the_closure_is_what_the_image_lacks():
    image = closure.read_freeze()
    assert image["torch"] == "2.11.0" and "python" not in image  # the header lines are not packages
    for name in ("closure-full.txt", "lean_requirements.txt"):
        wheels, notes = _closure(name)
        assert wheels["vllm"][0] == "0.26.0"
        brought_from_image = sorted(set(wheels) & set(image))
        assert not brought_from_image, f"{name} brings what the image has: {brought_from_image}"
        for n, (v, wheel, sha) in wheels.items():
            # the wheel file is that distribution at that version, with the sha256 pip reported
            assert canonicalize_name(wheel.split("-")[0]) == n and wheel.split("-")[1] == v, wheel
            assert re.fullmatch(r"[0-9a-f]{64}", sha), (n, sha)
        for line in notes:
            m = re.match(r"# (image|conflict) (\S+)==(\S+)", line)
            if m:  # every image line names the image's own version
                assert image[canonicalize_name(m.group(2))] == m.group(3), line
        assert re.match(rf"# {len(wheels)} wheels", notes[1]), notes[1]
    full, _ = _closure("closure-full.txt")
    lean, notes = _closure("lean_requirements.txt")
    assert set(lean) < set(full) and all(full[n] == lean[n] for n in lean)  # the same pick, fewer
    skipped = {line.split()[2] for line in notes if line.startswith("# skipped")}
    assert skipped and skipped <= set(full) and not skipped & set(lean)
    def conflicts(lines: list[str]) -> set[str]:
        return {canonicalize_name(line.split()[2].split("==")[0]) for line in lines
                if line.startswith("# conflict")}

    # each conflict kept from the image is declared (and explained) in closure.CONFLICTS; the lean set: fewer
    assert conflicts(_closure("closure-full.txt")[1]) == set(closure.CONFLICTS)
    assert {"numba", "numpy", "setuptools"} <= conflicts(notes) < set(closure.CONFLICTS)


def test_stand_in_wheels_carry_the_version_and_nothing_else(tmp_path: Path):
    w = closure.stand_in_wheel(tmp_path, "nvidia-cudnn-cu13", "9.19.0.56+image")
    with zipfile.ZipFile(w) as z:
        meta = z.read("nvidia_cudnn_cu13-9.19.0.56+image.dist-info/METADATA").decode()
        assert "Version: 9.19.0.56+image" in meta and "Requires-Dist" not in meta
        assert sorted(n.rsplit("/", 1)[1] for n in z.namelist()) == ["METADATA", "RECORD", "WHEEL"]


def _sh(*args: str, env: dict[str, str] | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    import os

    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, cwd=cwd,
                          env=dict(os.environ, **(env or {})))


def test_parts_rejoin_to_the_same_bytes(tmp_path: Path):
    b, parts, wheels = tmp_path / "b", tmp_path / "parts", tmp_path / "w"
    (b / "wheels").mkdir(parents=True)
    payload = {"x-1.0-py3-none-any.whl": bytes(range(256)) * 9000, "y-2.0-py3-none-any.whl": b"tail" * 10}
    for name, data in payload.items():
        (b / "wheels" / name).write_bytes(data)
    env = {"VLLM_BUNDLE": str(b), "VLLM_PARTS": str(parts), "VLLM_WHEELS": str(wheels), "PART_MIB": "1",
           "TINYSTATE_TMP": str(tmp_path / "tinystate")}
    r = _sh("pack", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    folders = sorted(p.name for p in b.iterdir() if p.is_dir())
    assert folders == ["1", "2", "3"]  # 2.2 MiB in parts of 1 MiB, one folder per device call
    assert all((b / f / f"part-{f}").stat().st_size <= 2**20 for f in folders)
    r = _sh("join", env=env)
    assert r.returncode == 2 and "no parts" in r.stdout  # nothing carried yet: refused
    for f in folders[:2]:
        assert _sh("carry", f, env=env, cwd=tmp_path).returncode == 0
    r = _sh("join", env=env)
    assert r.returncode == 2 and "parts missing: part-3" in r.stdout
    assert _sh("carry", "3", env=env, cwd=tmp_path).returncode == 0
    r = _sh("join", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert {p.name: p.read_bytes() for p in (wheels / "wheels").iterdir()} == payload
    # a part changed on the way is refused where it arrives
    data = bytearray((b / "2" / "part-2").read_bytes())
    data[100] ^= 1
    (b / "2" / "part-2").write_bytes(bytes(data))
    r = _sh("carry", "2", env=env, cwd=tmp_path)
    assert r.returncode == 4 and not (parts / "part-2").exists()


def test_a_kept_prep_rides_along_with_the_parts(tmp_path: Path):
    """carry and install keep the .tinystate parts a call brings (where measure restores them from); a call
    without them leaves nothing behind."""
    b, parts, stash, here = tmp_path / "b", tmp_path / "parts", tmp_path / "tinystate", tmp_path / "checkout"
    (b / "wheels").mkdir(parents=True)
    (b / "wheels" / "x-1.0-py3-none-any.whl").write_bytes(b"wheel")
    here.mkdir()
    env = {"VLLM_BUNDLE": str(b), "VLLM_PARTS": str(parts), "VLLM_WHEELS": str(tmp_path / "w"),
           "TINYSTATE_TMP": str(stash)}
    assert _sh("pack", env=env, cwd=here).returncode == 0
    r = _sh("carry", "1", env=env, cwd=here)
    assert r.returncode == 0 and not stash.exists(), r.stdout  # no .tinystate in this call
    (here / ".tinystate").mkdir()
    (here / ".tinystate" / "tinystate.part00").write_bytes(b"first part")
    (here / ".tinystate" / "tinystate.sha256").write_text("0" * 64 + "  tinystate.part00\n")
    r = _sh("carry", "1", env=env, cwd=here)
    assert r.returncode == 0 and "tinystate: parts here: tinystate.part00" in r.stdout, r.stdout + r.stderr
    assert (stash / "tinystate.part00").read_bytes() == b"first part"
    assert (stash / "tinystate.sha256").exists()
    assert (parts / "part-1").exists()  # the vLLM part still arrived


def test_the_script_parses_and_every_stage_is_wired():
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    text = SCRIPT.read_text()
    header = set(re.findall(r"^#   (\w+)(?: N)?\s", text, re.M))
    cases = set(re.findall(r"^  (\w+)\) stage_\w+", text, re.M))
    functions = set(re.findall(r"^stage_(\w+)\(\)", text, re.M))
    assert header == cases == functions
    assert {"build", "carry", "install", "smoke", "measure", "dry"} <= cases
    dispatch = text.split('case "$STAGE"')[1]
    assert {f"stage_{c}" for c in cases} <= set(re.findall(r"\b(stage_\w+)", dispatch))
    r = _sh("nonsense")
    assert r.returncode == 2 and "unknown stage" in r.stdout


def _vllm_flags() -> list[str]:
    block = re.search(r"^VLLM_FLAGS=\((.*?)\)$", SCRIPT.read_text(), re.M | re.S)
    assert block
    return shlex.split(block.group(1).replace("\\\n", " "))


def test_what_vllm_sh_passes_is_vllm_0_26_s():
    flags = _vllm_flags()
    assert flags == make_vllm_plan.FLAGS[:len(flags)]  # the smoke's and the measured servers' flags agree
    smoke = ["/tmp/vllm-smoke/target", "--served-model-name", "tiny", "--load-format", "dummy",
             "--max-model-len", "2048", "--gpu-memory-utilization", "0.3", "--max-num-seqs", "32", *flags,
             "--speculative-config",
             '{"method":"eagle3","model":"/tmp/vllm-smoke/draft","num_speculative_tokens":3}']
    assert serve_check.judge(smoke, "0.26.0")["stage"] == "ok"
    assert serve_check.judge([*smoke, "--speculative-num-steps", "3"], "0.26.0")["stage"] == "parse"


def test_the_measured_plan_on_both_engines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """make_vllm_plan.py on decide.yaml: the SGLang arms as they were, vLLM's baseline and EAGLE-3 with the
    same head; every vLLM argv draftbench builds for it is one vLLM 0.26.0's parser accepts."""
    work = tmp_path / "w"
    r = subprocess.run([sys.executable, str(H / "make_plan.py"), "--decide", str(work), "--sim"], cwd=ROOT,
                       capture_output=True, text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    decide = yaml.safe_load((work / "decide.yaml").read_text())
    for sim in (True, False):
        make_vllm_plan.main(str(work), sim=sim)
        plan = load_plan(work / "vllm.yaml")
        assert [(v.name, v.engine) for v in plan.variants] == [
            ("baseline", "sglang"), ("eagle3", "sglang"), ("vllm-base", "vllm"), ("vllm-eagle3", "vllm")]
        assert plan.variant("vllm-eagle3").drafter.path == plan.variant("eagle3").drafter.path
        assert plan.run.concurrency == decide["run"]["concurrency"]
        if not sim:
            assert plan.target.vllm.pinned == "0.26.0"
            for v in ("vllm-base", "vllm-eagle3"):
                argv = launch.build_launch_argv(plan, plan.variant(v), 8000, "0.26.0")
                skip = len(launch.launcher_argv(plan.target))
                assert serve_check.judge(argv[skip:], "0.26.0")["stage"] == "ok", argv
    monkeypatch.setenv("MEASURE_ARMS", "vllm")  # vLLM's arms alone: what one 600 s call holds
    make_vllm_plan.main(str(work))
    assert [v.name for v in load_plan(work / "vllm.yaml").variants] == ["vllm-base", "vllm-eagle3"]
    rows = (work / "vllm-bench.jsonl").read_text().splitlines()
    assert len(rows) == len(yaml.safe_load((work / "sim-suite.yaml").read_text())["prompts"])


# --- the sm_90 stripper, on a hand-made ELF with a .nv_fatbin section ---

def _entry(kind: int, arch: int, payload: bytes) -> bytes:
    head = struct.pack("<HHIIIIIII", kind, 0x101, 64, len(payload), 0, len(payload), 0, 0, arch)
    return head.ljust(64, b"\0") + payload


def _container(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", strip_wheel.FATBIN_MAGIC, 1, 16, len(body)) + body


def _elf(fatbin: bytes) -> bytes:
    strtab = b"\0.nv_fatbin\0.shstrtab\0"
    fat_off = 64
    str_off = fat_off + len(fatbin)
    sh_off = (str_off + len(strtab) + 7) // 8 * 8
    head = bytearray(64)
    head[:5] = b"\x7fELF\x02"
    struct.pack_into("<Q", head, 0x28, sh_off)
    struct.pack_into("<HHH", head, 0x3A, 64, 3, 2)
    shdrs = bytes(64) + struct.pack("<IIQQQQIIQQ", 1, 1, 2, 0, fat_off, len(fatbin), 0, 0, 8, 0)
    shdrs += struct.pack("<IIQQQQIIQQ", 11, 3, 0, 0, str_off, len(strtab), 0, 0, 1, 0)
    return bytes(head) + fatbin + strtab + bytes(sh_off - str_off - len(strtab)) + shdrs


def test_the_stripper_keeps_what_an_sm90_loads(tmp_path: Path):
    a = _container(_entry(2, 80, b"A80" * 50), _entry(2, 90, b"A90" * 50), _entry(1, 90, b"P90" * 50),
                   _entry(2, 100, b"A100" * 50))
    b = _container(_entry(2, 80, b"B80" * 50), _entry(1, 80, b"Q80" * 50), _entry(1, 86, b"Q86" * 50),
                   _entry(1, 100, b"Q100" * 50))
    c = _container(_entry(2, 100, b"C100" * 50))
    lib = _elf(a + bytes(8) + b + c)  # padding between containers is skipped
    thin, zeroed = strip_wheel.thin_to_sm90(lib)
    assert len(thin) == len(lib)
    kept = {bytes(lib[e.offset + e.header_size:e.offset + e.header_size + 3]) for e in
            strip_wheel.fatbin_entries(thin, *strip_wheel.fatbin_section(thin))
            if any(thin[e.offset + e.header_size:e.offset + e.header_size + e.payload_size])}
    # a: its sm_90 cubin; b: no sm_90 cubin, so the newest PTX at or below 9.0; c: nothing runs on sm_90
    assert kept == {b"A90", b"Q86"}
    assert zeroed == sum(len(p) for p in (b"A80" * 50, b"P90" * 50, b"A100" * 50, b"B80" * 50, b"Q80" * 50,
                                          b"Q100" * 50, b"C100" * 50))
    src = tmp_path / "x-1.0-cp38-abi3-linux_x86_64.whl"
    with zipfile.ZipFile(src, "w") as z:
        z.writestr("x/_C.so", lib)
        z.writestr("x/big.so", b"drop me")
        z.writestr("x-1.0.dist-info/RECORD", "")
    dst = tmp_path / "out.whl"
    r = strip_wheel.repack(str(src), str(dst), ["x/big.so"], ["x/*.so"])
    assert r["zeroed"] == zeroed
    with zipfile.ZipFile(dst) as z:
        assert z.read("x/_C.so") == thin and "x/big.so" not in z.namelist()
        record = z.read("x-1.0.dist-info/RECORD").decode()
        assert f"x/_C.so,{strip_wheel.record_hash(thin)},{len(thin)}" in record


def test_a_malformed_fatbin_is_refused():
    bad = _elf(struct.pack("<IHHQ", strip_wheel.FATBIN_MAGIC, 1, 16, 80) + _entry(2, 90, b"x" * 64)[:40]
               + bytes(40))
    with pytest.raises(ValueError):
        strip_wheel.thin_to_sm90(bad)
