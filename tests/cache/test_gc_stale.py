"""gc --stale --orphans: the blobs of the stale entries it removes go in the same run."""

from __future__ import annotations

import json
import os
import time

from click.testing import CliRunner

from tests.conftest import small_geometries
from tests.hostile.conftest import tree
from wgradcache.cache.store import TargetCache
from wgradcache.cli import main


def test_stale_entries_take_their_fresh_blobs_with_them_and_orphans_keep_their_grace(
        tmp_path):
    """Built from two geometries, collected against one: the other geometry's entries are
    stale. Their blobs are seconds old, yet this run removed their last entry under the
    lock, so they go now (blob, sidecar, stamp). A young blob no entry named before the
    run still waits out the grace; an old one goes. Exactly those files, nothing else."""
    (tmp_path / "two").mkdir()
    big = small_geometries(tmp_path / "two", extra_ladder=((64, 32, 32, 2, 1),))
    one = small_geometries(tmp_path)
    cache = tmp_path / "cache"
    r = CliRunner().invoke(main, ["build", "--target", "gfx1250", "--geometries", str(big),
                                  "--dtype", "fp16", "--variant", "sync.default.none",
                                  "--cache-dir", str(cache), "--json"])
    assert r.exit_code == 0, r.output
    c = TargetCache(cache, "gfx1250")
    entries = {ik: e for ik, e in c.iter_entries()}
    stale = {ik: e for ik, e in entries.items() if "-t32x32x32-w1x1-" not in e.label}
    live = {ik: e for ik, e in entries.items() if ik not in stale}
    assert len(stale) >= 1 and len(live) == 1
    freed = {e.blob for e in stale.values()} - {e.blob for e in live.values()}
    assert freed
    # two orphans from before the run: a young one (grace) and an old one (collected)
    young, old = "a" * 64, "b" * 64
    for key in (young, old):
        c.blob_path(key).write_bytes(b"orphan " + key.encode())
    hour_ago = time.time() - 3600
    os.utime(c.blob_path(old), (hour_ago, hour_ago))

    before = tree(cache)
    r = CliRunner().invoke(main, ["gc", "--stale", "--orphans", "--geometries", str(one),
                                  "--target", "gfx1250", "--cache-dir", str(cache), "--json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)[0]
    assert (rep["stale_entries"], rep["corrupt_entries"], rep["orphan_blobs"]) == \
        (len(stale), 0, len(freed) + 1)
    t = "gfx1250"
    removed = set(before) - set(tree(cache))
    want = {f"{t}/entries/{c.entry_path(ik).name}" for ik in stale}
    want |= {f"{t}/blobs/{k}.hsaco" for k in freed | {old}}
    want |= {f"{t}/blobs/{c.sidecar_path(k).name}" for k in freed}
    want |= {f"{t}/used/{k}" for k in freed}
    assert want - {f"{t}/blobs/{old}.hsaco"} <= set(before)  # sidecar and stamp were there
    assert removed == want
    assert set(tree(cache)) - set(before) == set()
    assert c.blob_path(young).exists()
