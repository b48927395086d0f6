"""verify --level numerics on the small cache with a (fake) gfx1250 device present: the
stored code objects are what runs, and a device that computes wrong fails verify."""

from __future__ import annotations

import json

from click.testing import CliRunner

from wgradcache.cache.entry import record_json
from wgradcache.cache.store import TargetCache
from wgradcache.cli import main
from wgradcache.pipeline.verify import VerifyRequest, verify
from wgradcache.runtime.hip import HipSession
from wgradcache.wgrad.stage2 import stage2_symbol


def _entries(small_cache):
    cache = TargetCache(small_cache["cache"], "gfx1250")
    return [record_json(e) for _, e in cache.iter_entries()]


def test_verify_device_hip_launches_the_stored_code_objects(small_cache, fake_hip):
    r = CliRunner().invoke(main, ["verify", "--from-cache", "--cache-dir",
                                  str(small_cache["cache"]), "--geometries",
                                  str(small_cache["geometries"]), "--json", "--level",
                                  "numerics", "--device", "hip"])
    doc = json.loads(r.stdout)
    assert r.exit_code == 0, doc["failures"]
    assert (doc["ok"], doc["checked"], doc["failed"]) == (True, 20, 0)
    assert doc["notes"] == ["hip: numerics ran on the gfx1250 device 0 (stored code objects)"]
    entries = _entries(small_cache)
    two_stage = [e for e in entries if e["identity"]["reduction"] == "two_stage"]
    stage1 = [ln.symbol for ln in fake_hip.launches if not ln.symbol.startswith("wgrad_stage2")]
    stage2 = [ln.symbol for ln in fake_hip.launches if ln.symbol.startswith("wgrad_stage2")]
    # one probe launch per unsplit entry; split-K ones at split 2 (policy), 1, 3, 7 and 35
    runs = {e["symbol"]: 1 if e["identity"]["reduction"] == "none" else 5 for e in entries}
    assert sorted(stage1) == sorted(s for s, n in runs.items() for _ in range(n))
    assert sorted(stage2) == sorted(stage2_symbol(e["identity"]["dw_dtype"],
                                                  e["identity"]["ws_replicas"])
                                    for e in two_stage for _ in range(5))
    assert len(two_stage) == 2 and fake_hip.faults == [] and fake_hip.allocations == {}


def test_verify_judges_the_device_output(small_cache, fake_hip, monkeypatch):
    """--device auto picks the device; with the launcher's memsets knocked out, exactly
    the split-K entries (atomic dW, two-stage workspace) fail numerics."""
    monkeypatch.setattr(HipSession, "memset", lambda self, addr, value, n: None)
    rep = verify(VerifyRequest(cache_dir=str(small_cache["cache"]), level="numerics",
                               device="auto", geometries_file=str(small_cache["geometries"])))
    split = sorted(e["label"] for e in _entries(small_cache)
                   if e["identity"]["reduction"] != "none")
    assert sorted(f.label for f in rep.failures) == split
    for f in rep.failures:  # NaN from the unzeroed memory: an infinite error at every degree
        assert f.level == "numerics"
        runs = f.reason.split("; ")
        assert len(runs) == 5, f.reason
        assert all(r.startswith(f"FAIL {f.label} on 2,16,23,23,24,3,3,1,1 (gfx1250 device 0): "
                                "error inf <= bound") for r in runs), f.reason
    assert rep.notes == ["hip: numerics ran on the gfx1250 device 0 (stored code objects)"]
