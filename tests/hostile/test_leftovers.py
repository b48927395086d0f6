"""Nothing is left that nobody accounts for: a SIGKILL between a write's create and its
rename leaves ``<folder>/.<name>.<8 characters>.tmp``. verify counts every such file (an
integrity failure, with when gc removes it), gc removes those older than its grace
(``ORPHAN_GRACE``) and nothing else, and verify's hint and gc agree on a fresh orphan."""

from __future__ import annotations

import json
import os
import shutil
import time

from click.testing import CliRunner

from tests.hostile.conftest import tree
from wgradcache.cache.gc import ORPHAN_GRACE
from wgradcache.cli import main

T = "gfx1250"
OLD = ("temporary file of an unfinished write: nothing accounts for it (`wgradcache gc` "
       "removes it)")
FRESH = ("temporary file of an unfinished write: nothing accounts for it (`wgradcache gc` "
         "removes it once it is 10 minutes old; until then a writer may still need it)")


def _cli(small_cache, cache, *args: str):
    return CliRunner().invoke(main, [*args, "--geometries", str(small_cache["geometries"]),
                                     "--cache-dir", str(cache)])


def test_verify_counts_killed_writes_temp_files_and_gc_removes_the_stale_ones(
        small_cache, tmp_path):
    cache = tmp_path / "cache"
    shutil.copytree(small_cache["cache"], cache, symlinks=True)
    t = cache / T
    key = "ab" * 32
    stale = {"blobs": f".{key}.hsaco.k3x_9q0z.tmp", "entries": f".{key}.json.abcd1234.tmp",
             None: ".rejects.jsonl.0a1b2c3d.tmp"}
    for sub, name in stale.items():
        p = t / sub / name if sub else t / name
        p.write_bytes(b"\x7fELF half a blob")
        old = time.time() - ORPHAN_GRACE - 60
        os.utime(p, (old, old))
    fresh = t / "blobs" / f".{key}.json.fresh000.tmp"
    fresh.write_bytes(b"{")
    # not of the store's naming, or not a regular file: never listed, never removed
    (t / "blobs" / "notes.tmp").write_bytes(b"mine")
    (t / "blobs" / f".{key}.hsaco.link0000.tmp").symlink_to(tmp_path / "elsewhere")
    r = _cli(small_cache, cache, "verify", "--from-cache", "--level", "integrity", "--json")
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)
    assert doc["targets"][T]["temp_files"] == 4
    assert sorted((f["key"], f["reason"]) for f in doc["failures"]) == sorted(
        [(f"{sub}/{name}" if sub else name, OLD) for sub, name in stale.items()]
        + [(f"blobs/{fresh.name}", FRESH)])

    kept = {k: v for k, v in tree(cache).items()
            if not any(k.endswith(n) for n in stale.values())}
    r = _cli(small_cache, cache, "gc", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)[0]["temp_files"] == 3
    after = tree(cache)
    assert {k: v for k, v in after.items() if "stats" not in k} == {
        k: v for k, v in kept.items() if "stats" not in k}  # the stale three, nothing else

    r = _cli(small_cache, cache, "verify", "--from-cache", "--level", "integrity", "--json")
    doc = json.loads(r.stdout)
    assert [(f["key"], f["reason"]) for f in doc["failures"]] == [
        (f"blobs/{fresh.name}", FRESH)]


def test_verify_hint_and_gc_grace_agree_on_a_fresh_orphan(small_cache, tmp_path):
    cache = tmp_path / "cache"
    shutil.copytree(small_cache["cache"], cache, symlinks=True)
    blob = cache / T / "blobs" / f"{'cd' * 32}.hsaco"
    blob.write_bytes(b"\x7fELF orphan")
    hint = ("orphan blob: no entry names it (`wgradcache gc --orphans` removes it once it is "
            "10 minutes old; until then a writer may still need it)")
    r = _cli(small_cache, cache, "verify", "--from-cache", "--level", "integrity", "--json")
    assert [f["reason"] for f in json.loads(r.stdout)["failures"]] == [hint]
    r = _cli(small_cache, cache, "gc", "--orphans", "--json")
    assert json.loads(r.stdout)[0]["orphan_blobs"] == 0 and blob.exists()  # as it said
    old = time.time() - ORPHAN_GRACE - 1
    os.utime(blob, (old, old))
    r = _cli(small_cache, cache, "verify", "--from-cache", "--level", "integrity", "--json")
    assert [f["reason"] for f in json.loads(r.stdout)["failures"]] == [
        "orphan blob: no entry names it (`wgradcache gc --orphans` removes it)"]
    r = _cli(small_cache, cache, "gc", "--orphans", "--json")
    assert json.loads(r.stdout)[0]["orphan_blobs"] == 1 and not blob.exists()
