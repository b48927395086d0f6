"""verify: the small cache passes every level; each planted fault is caught."""

from __future__ import annotations

import dataclasses
import json
import shutil
import xml.etree.ElementTree as ET

from click.testing import CliRunner

from wgradcache.cache.store import TargetCache
from wgradcache.cli import main
from wgradcache.pipeline.verify import VerifyRequest, verify


def _verify(cache_dir, geometries, *args):
    return CliRunner().invoke(main, ["verify", "--from-cache", "--cache-dir", str(cache_dir),
                                     "--geometries", str(geometries), "--json", *args])


PROBE = "2,16,7,7,24,3,3,1,1"  # probe_problem: unsplit entries
SPLIT_PROBE = "2,16,23,23,24,3,3,1,1"  # split_probe: wg_K 1058, 34 K tiles of 32
SPLIT_RUNS = [(2, True), (1, False), (3, False), (7, False), (35, False)]


def test_small_cache_passes_numerics_from_the_cli(small_cache, tmp_path, monkeypatch):
    """Every split-K entry is launched at the policy's degree (2 on its probe) and at 1, 3,
    7 and 35 (one past the 34 K tiles); unsplit entries once; JSON, JUnit name the degrees."""
    from wgradcache.pipeline import emulate

    launched = []
    real = emulate.run_emulated

    def spy(spec, problem, *, split_k=None, seed=0, **kw):
        r = real(spec, problem, split_k=split_k, seed=seed, **kw)
        launched.append((spec.label(), problem.short(), split_k, r.plan.degree, r.passed))
        return r

    monkeypatch.setattr(emulate, "run_emulated", spy)
    junit = tmp_path / "verify.xml"
    r = _verify(small_cache["cache"], small_cache["geometries"], "--level", "numerics",
                "--device", "auto", "--junit", str(junit))
    doc = json.loads(r.stdout)
    assert r.exit_code == 0, doc["failures"]
    # 18 entries and the stage-2 kernels of the two-stage ones (fp16, bf16 at R = 8)
    assert (doc["ok"], doc["checked"], doc["failed"], doc["not_covered"]) == (True, 20, 0, 0)
    assert doc["targets"]["gfx1250"] == {"entries": 18, "expected": 18, "missing": 0,
                                         "complete": True, "orphans": 0,
                                         "temp_files": 0, "timing_rows": 0,
                                         "stale_timing_rows": 0}
    # no GPU here: the device path says so in one line instead of failing silently
    assert any(n.startswith("hip: no gfx1250 device") for n in doc["notes"])
    split = {e.label for _, e in TargetCache(small_cache["cache"], "gfx1250").iter_entries()
             if e.identity["reduction"] in ("atomic", "two_stage")}
    assert len(split) == 10 and len(doc["numerics"]) == 18
    want = {}
    for n in doc["numerics"]:
        runs = SPLIT_RUNS if n["label"] in split else [(1, True)]
        problem = SPLIT_PROBE if n["label"] in split else PROBE
        assert n["status"] == "passed"
        assert n["degrees"] == sorted(d for d, _ in runs)
        assert n["runs"] == [{"problem": problem, "degree": d, "policy": pol, "passed": True}
                             for d, pol in runs]
        want[n["label"]] = [(n["label"], problem, None if pol else d, d, True)
                            for d, pol in runs]
    assert sorted(launched, key=str) == sorted((x for v in want.values() for x in v), key=str)
    suite = ET.parse(junit).getroot()
    # per entry: integrity, structure, reproduce, numerics; per stage-2 kernel: the first three
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == (
        str(18 * 4 + 2 * 3), "0", "0")
    out = {c.get("name"): c.findtext("system-out") for c in suite
           if c.get("classname") == "verify.numerics"}
    assert out == {label: (f"{SPLIT_PROBE} at split 2 (policy), 1, 3, 7, 35" if label in split
                           else f"{PROBE} at split 1 (policy)") for label in want}


def test_device_hip_without_a_device_fails_with_the_reason(small_cache):
    r = _verify(small_cache["cache"], small_cache["geometries"], "--level", "numerics",
                "--device", "hip")
    doc = json.loads(r.stdout)
    assert r.exit_code == 1
    assert doc["failures"][0]["reason"].startswith("--device hip: no device:")


def _copy(small_cache, tmp_path):
    dst = tmp_path / "cache"
    shutil.copytree(small_cache["cache"], dst)
    return TargetCache(dst, "gfx1250"), small_cache["geometries"]


def _entries(cache):
    return [(ik, e) for ik, e in cache.iter_entries()]


def _fail_reasons(cache, geometries, level, problems=()):
    rep = verify(VerifyRequest(cache_dir=str(cache.root), level=level, device="emulator",
                               geometries_file=str(geometries), problems=problems))
    return [(f.level, f.reason) for f in rep.failures]


def test_flipped_byte_in_a_blob(small_cache, tmp_path):
    cache, geo = _copy(small_cache, tmp_path)
    ik, e = _entries(cache)[0]
    p = cache.blob_path(e.blob)
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0x01
    p.write_bytes(bytes(data))
    reasons = _fail_reasons(cache, geo, "integrity")
    assert ("integrity", f"blob {e.blob[:16]} does not match the size/sha256 its entry "
                         "records") in reasons


def test_deleted_blob(small_cache, tmp_path):
    cache, geo = _copy(small_cache, tmp_path)
    _ik, e = _entries(cache)[1]
    cache.blob_path(e.blob).unlink()
    assert ("integrity", f"blob {e.blob[:16]} is missing") in _fail_reasons(
        cache, geo, "integrity")


def test_orphan_blob(small_cache, tmp_path):
    """A blob no entry names (what a build killed between blob and entry leaves) fails
    integrity with gc's hint, and the target's summary counts it; gc --orphans mends it."""
    cache, geo = _copy(small_cache, tmp_path)
    cache.write_blob("f" * 64, b"\x7fELF orphan")
    reasons = _fail_reasons(cache, geo, "integrity")
    assert [r for r in reasons if r[1].startswith("orphan blob")] == [
        ("integrity", "orphan blob: no entry names it (`wgradcache gc --orphans` removes it "
                      "once it is 10 minutes old; until then a writer may still need it)")]
    doc = json.loads(_verify(cache.root, geo, "--level", "integrity").stdout)
    assert (doc["failed"], doc["targets"]["gfx1250"]["orphans"]) == (1, 1)


def test_truncated_entry_file(small_cache, tmp_path):
    cache, geo = _copy(small_cache, tmp_path)
    ik, _ = _entries(cache)[2]
    p = cache.entry_path(ik)
    p.write_bytes(p.read_bytes()[:100])
    reasons = _fail_reasons(cache, geo, "integrity")
    assert any(level == "integrity" and "not whole JSON" in r for level, r in reasons)


def test_stale_entry_is_reported(small_cache, tmp_path):
    """An entry the current walk does not yield (here: a vec pair the file does not have)."""
    from wgradcache.model.spec import from_label

    cache, geo = _copy(small_cache, tmp_path)
    spec = from_label("gfx1250-fp16-t32x32x32-w1x1-v8x8-sync-default-none")
    e = cache.read_entry(spec.identity_key())
    old = dataclasses.replace(spec, vec_a=4, vec_b=4)
    cache.write_entry(dataclasses.replace(e, identity_key=old.identity_key(),
                                          identity=old.canonical(), label=old.label()))
    assert ("integrity", "stale: the current walk does not yield this identity "
                         "(`wgradcache gc --stale` removes it)") in _fail_reasons(
        cache, geo, "integrity")


def test_missing_stage2_kernel(small_cache, tmp_path):
    cache, geo = _copy(small_cache, tmp_path)
    assert sorted(cache.stage2_entries()) == ["bf16-wsr8", "fp16-wsr8"]
    blob = cache.stage2_entries()["bf16-wsr8"].blob
    (cache.dir / "stage2" / "bf16-wsr8.json").unlink()
    reasons = _fail_reasons(cache, geo, "integrity")
    assert ("integrity", "two-stage entries without their stage-2 kernel") in reasons
    assert any(r.startswith("orphan blob") for _, r in reasons)
    assert cache.has_blob(blob)
