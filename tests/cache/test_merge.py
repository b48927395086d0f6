"""merge without a compiler: synthetic shard caches."""

from __future__ import annotations

from pathlib import PurePath

from tests.cache.test_store import _entry
from wgradcache.cache.merge import merge
from wgradcache.cache.store import TargetCache


def _shard(root, keys: list[str]) -> None:
    c = TargetCache(root, "gfx1250")
    for k in keys:
        ref = c.write_blob(f"b{k}", f"blob {k}".encode())
        c.write_entry(_entry(k, blob=ref.key, blob_size=ref.size, blob_sha256=ref.sha256))


def test_merge_plans_with_one_lookup_per_entry(tmp_path, monkeypatch):
    """Planning looked each entry up by scanning the plan so far (a Path comparison per
    planned entry: O(n^2), 0.5 M comparisons for a 1000-entry merge). It is a dict now:
    the comparisons do not grow with the plan."""
    n = 120
    shards = []
    for i in range(3):
        shards.append(tmp_path / f"s{i}")
        _shard(shards[-1], [f"{i}{j:04d}" for j in range(n)])
    _shard(tmp_path / "dup", ["00000"])  # the same entry again: skipped, not copied
    shards.append(tmp_path / "dup")
    calls = []
    eq = PurePath.__eq__
    monkeypatch.setattr(PurePath, "__eq__", lambda a, b: calls.append(1) or eq(a, b))
    rep = merge(shards, tmp_path / "dest")
    monkeypatch.undo()
    assert (rep.ok, rep.copied_entries, rep.copied_blobs, rep.skipped) == (True, 3 * n, 3 * n, 1)
    assert len(calls) < 3 * n  # the list scan made ~ (3n)^2 / 2 = 64800
    dest = TargetCache(tmp_path / "dest", "gfx1250")
    assert len(dest.entry_keys()) == 3 * n
    assert dest.read_entry("10007") == _entry("10007", blob="b10007", blob_size=10,
                                               blob_sha256=dest.blob_ref("b10007").sha256)
