"""A relink proves the bytes it reuses: an orphan blob (no entry vouches for it) is relinked
only when it is the size and sha256 its sidecar records, and a stage-2 kernel is up to date
only when its blob is the bytes its record names; otherwise the job is compiled again."""

from __future__ import annotations

import json
import shutil

from click.testing import CliRunner

from wgradcache.cache.store import TargetCache
from wgradcache.cli import main

FP16 = "gfx1250-fp16-t32x32x32-w1x1-v8x8-sync-default-none"


def _scene(small_cache, tmp_path):
    root = tmp_path / "cache"
    shutil.copytree(small_cache["cache"], root)
    c = TargetCache(root, "gfx1250")
    e = next(e for _, e in c.iter_entries() if e.label == FP16)
    return c, e


def _build(c: TargetCache, small_cache) -> dict:
    r = CliRunner().invoke(main, ["build", "--target", "gfx1250", "--dtype", "fp16",
                                  "--dtype", "bf16", "--geometries",
                                  str(small_cache["geometries"]), "--cache-dir", str(c.root),
                                  "--json"])
    assert (r.exit_code, r.stderr) == (0, ""), r.output
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_an_orphan_blob_that_is_not_its_sidecars_bytes_is_compiled_not_relinked(
        small_cache, tmp_path):
    """Before, the relink recorded whatever bytes were on disk (their own sha256) in the new
    entry: a flipped byte in an orphan became a trusted blob."""
    c, e = _scene(small_cache, tmp_path)
    honest = c.read_blob(e.blob)
    c.remove_entry(e.identity_key)  # a build killed between blob and entry leaves this
    flipped = bytearray(honest)
    flipped[len(flipped) // 2] ^= 0x20
    c.blob_path(e.blob).write_bytes(bytes(flipped))
    s = _build(c, small_cache)
    assert (s["built"], s["relinked"], s["up_to_date"], s["failed"]) == (1, 0, 17, 0)
    assert c.read_blob(e.blob) == honest
    again = c.read_entry(e.identity_key)
    assert (again.blob_size, again.blob_sha256) == (e.blob_size, e.blob_sha256)
    meta = c.read_sidecar(e.blob)
    assert (meta.blob_size, meta.blob_sha256) == (e.blob_size, e.blob_sha256)


def test_an_orphan_with_its_sidecars_bytes_is_relinked(small_cache, tmp_path):
    c, e = _scene(small_cache, tmp_path)
    c.remove_entry(e.identity_key)
    s = _build(c, small_cache)
    assert (s["built"], s["relinked"], s["up_to_date"]) == (0, 1, 17)
    assert c.read_entry(e.identity_key).blob_sha256 == e.blob_sha256


def test_a_sidecar_from_before_sha256_is_not_trusted_for_a_relink(small_cache, tmp_path):
    """An older version's sidecar names no bytes (``UNKNOWN_SHA256``): the job compiles,
    and the new sidecar names them."""
    c, e = _scene(small_cache, tmp_path)
    c.remove_entry(e.identity_key)
    side = c.sidecar_path(e.blob)
    doc = json.loads(side.read_bytes())
    del doc["blob_size"], doc["blob_sha256"]
    side.write_text(json.dumps(doc))
    s = _build(c, small_cache)
    assert (s["built"], s["relinked"], s["up_to_date"]) == (1, 0, 17)
    assert c.read_sidecar(e.blob).blob_sha256 == e.blob_sha256


def test_a_stage2_blob_that_is_not_its_bytes_is_compiled_again(small_cache, tmp_path):
    """Before, a stage-2 kernel whose blob existed was up to date, truncated or not."""
    c, _ = _scene(small_cache, tmp_path)
    s2 = c.read_stage2("fp16-wsr8")
    honest = c.read_blob(s2.blob)
    c.blob_path(s2.blob).write_bytes(honest[:-7])
    s = _build(c, small_cache)
    assert (s["up_to_date"], s["stage2_failed"], s["bytes"]) == (18, 0, len(honest))
    assert c.read_blob(s2.blob) == honest
    assert c.check_blob(s2.blob, s2.blob_size, s2.blob_sha256) == (True, "")
