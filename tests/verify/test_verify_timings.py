"""verify --level integrity checks the cache's timings: a file that is not whole and rows of
no entry are failures; rows of an older blob are stale (counted, not failures)."""

from __future__ import annotations

import json
import shutil

from click.testing import CliRunner

from wgradcache.cache.store import TargetCache
from wgradcache.cache.timings import DeviceClass, TimingRow, TimingsFile
from wgradcache.cli import main

DEV = DeviceClass("AMD Fake GPU", 256, "6.4", "6.4")


def _verify(cache, geometries):
    r = CliRunner().invoke(main, ["verify", "--from-cache", "--cache-dir", str(cache),
                                  "--geometries", str(geometries), "--level", "integrity",
                                  "--json"])
    return r, json.loads(r.stdout)


def test_verify_checks_the_timings(small_cache, tmp_path):
    cache = tmp_path / "cache"
    shutil.copytree(small_cache["cache"], cache)
    c = TargetCache(cache, "gfx1250")
    ik, entry = next(iter(c.iter_entries()))
    rows = (TimingRow(ik, entry.blob, "2,32,8,8,32,3,3,1,1", "fp16", 1, 0.5, 0.0, 10, 1.0),
            TimingRow(ik, "ab" * 32, "2,32,8,8,32,3,3,1,1", "fp16", 1, 0.5, 0.0, 10, 1.0))
    with c.lock():
        c.write_timings(TimingsFile(DEV, rows))
    r, doc = _verify(cache, small_cache["geometries"])
    assert r.exit_code == 0, doc["failures"]
    t = doc["targets"]["gfx1250"]
    assert (t["timing_rows"], t["stale_timing_rows"]) == (2, 1)
    with c.lock():
        c.write_timings(TimingsFile(DEV, (*rows, TimingRow("cd" * 32, "ab" * 32, "1,16,8,8,16,1,1",
                                                          "fp16", 1, 0.5, 0.0, 10, 1.0))))
    r, doc = _verify(cache, small_cache["geometries"])
    assert r.exit_code == 1
    path = c.timings_path(DEV.slug())
    assert [f["reason"] for f in doc["failures"]] == [
        f"{path}: 1 row(s) of no entry, e.g. cdcdcdcdcdcdcdcd (`wgradcache gc` drops them)"]
    path.write_text('{"device": {"name": "AMD Fake GPU", "sm_count": 256, "driver": "6.4", '
                    '"runtime": "6.4"}, "rows": [], "vendor": [], "fit": null, "x": 1}')
    r, doc = _verify(cache, small_cache["geometries"])
    assert r.exit_code == 1
    assert [f["reason"] for f in doc["failures"]] == [
        f"{path}: corrupt: file: unknown field 'x'"]
