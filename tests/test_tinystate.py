"""benchmarks/h200/tinystate.sh: a prep's trained target and head packed into parts a device call can
bring back, carried into a later session over several calls, and restored only once every part is there
and checks."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).parent.parent


def _sh(script: str, cwd: Path, tmp: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "TINYSTATE_TMP": str(tmp / "stash")}
    return subprocess.run(["bash", "-c", f"source {ROOT / 'benchmarks/h200/tinystate.sh'}; {script}"],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def _prep(w: Path) -> None:
    """What accept.sh prep leaves: the target, checkpoints (optimizer state too), `draft` to the last."""
    (w / "tiny-stdlib").mkdir(parents=True)
    (w / "tiny-stdlib" / "model.safetensors").write_bytes(os.urandom(40 * 1024 * 1024))  # 3 parts of 15 MiB
    for step in (300, 600):
        ck = w / "ckpt" / f"epoch_{step // 25}_step_{step}"
        ck.mkdir(parents=True)
        (ck / "model.safetensors").write_bytes(os.urandom(1024) + bytes([step % 256]))
        (ck / "config.json").write_text('{"architectures": ["LlamaForCausalLMEagle3"]}')
        (ck / "training_state.pt").write_bytes(os.urandom(4096))
    (w / "draft").symlink_to(w / "ckpt" / "epoch_24_step_600")
    for name in ("plan.yaml", "suite.yaml", "bench.jsonl", "regen.jsonl"):
        (w / name).write_text(f"{name}\n")


def test_pack_carry_in_parts_and_restore(tmp_path):
    w = tmp_path / "tiny"
    _prep(w)
    out = tmp_path / "out"
    out.mkdir()
    packed = _sh(f"tinystate_pack {w} {out}", tmp_path, tmp_path)
    assert packed.returncode == 0, packed.stderr
    parts = sorted(p.name for p in out.glob("tinystate.part*"))
    assert parts == ["tinystate.part00", "tinystate.part01", "tinystate.part02"]
    assert all(p.stat().st_size <= 15 * 1024 * 1024 for p in out.glob("tinystate.part*"))
    # a later session, a fresh machine: the parts come over two calls, from the checkout's .tinystate/
    host = tmp_path / "checkout"
    (host / ".tinystate").mkdir(parents=True)
    fresh = tmp_path / "fresh"
    for name in ("tinystate.sha256", "tinystate.part00", "tinystate.part01"):
        (host / ".tinystate" / name).write_bytes((out / name).read_bytes())
    first = _sh(f"tinystate_stash && tinystate_restore {fresh}", host, tmp_path)
    assert first.returncode == 1 and "waiting for tinystate.part02" in first.stdout
    assert not (fresh / "draft").exists()
    for name in ("tinystate.part00", "tinystate.part01"):
        (host / ".tinystate" / name).unlink()
    (host / ".tinystate" / "tinystate.part02").write_bytes((out / "tinystate.part02").read_bytes())
    second = _sh(f"tinystate_stash && tinystate_restore {w.parent / 'fresh'}", host, tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "restored the trained target and head" in second.stdout
    # the same bytes, the link to the last checkpoint, no optimizer state, the earlier checkpoint left behind
    assert (fresh / "tiny-stdlib" / "model.safetensors").read_bytes() \
        == (w / "tiny-stdlib" / "model.safetensors").read_bytes()
    assert os.readlink(fresh / "draft") == str(fresh / "ckpt" / "epoch_24_step_600")
    assert (fresh / "draft" / "model.safetensors").read_bytes() \
        == (w / "ckpt" / "epoch_24_step_600" / "model.safetensors").read_bytes()
    assert not list(fresh.rglob("training_state.pt")) and not (fresh / "ckpt" / "epoch_12_step_300").exists()
    assert (fresh / "plan.yaml").read_text() == "plan.yaml\n" and (fresh / "regen.jsonl").exists()


def test_a_damaged_part_is_refused(tmp_path):
    w = tmp_path / "tiny"
    _prep(w)
    stash = tmp_path / "stash"
    stash.mkdir()
    assert _sh(f"tinystate_pack {w} {stash}", tmp_path, tmp_path).returncode == 0
    part = stash / "tinystate.part01"
    data = bytearray(part.read_bytes())
    data[100] ^= 0xFF
    part.write_bytes(bytes(data))
    r = _sh(f"tinystate_restore {tmp_path / 'fresh'}", tmp_path, tmp_path)
    assert r.returncode == 1 and "damaged" in r.stdout and not (tmp_path / "fresh" / "draft").exists()
