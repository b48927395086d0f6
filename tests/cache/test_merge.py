"""merge without a compiler: synthetic shard caches, and the supersede rule as a table."""

from __future__ import annotations

from dataclasses import replace
from pathlib import PurePath

import pytest

from tests.cache.records import entry, ik, key
from wgradcache.cache.merge import Digests, decide, merge
from wgradcache.cache.store import TargetCache

NOW = Digests(generator="g", toolchain="t")  # records.entry's digests


def _shard(root, keys: list[str], **fields) -> None:
    c = TargetCache(root, "gfx1250")
    for k in keys:
        ref = c.write_blob(key(f"b{k}"), f"blob {k}".encode())
        c.write_entry(entry(k, blob=ref.key, blob_size=ref.size, blob_sha256=ref.sha256,
                            **fields))


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
    b = key("b10007")
    assert dest.read_entry(ik("10007")) == entry("10007", blob=b, blob_size=10,
                                                   blob_sha256=dest.blob_ref(b).sha256)


_A = entry(blob=key("a"), blob_sha256=key("sha a"))
_OLD = {"generator_digest": "g0"}


@pytest.mark.parametrize(("new", "have", "current", "want"), [
    # the same blob: nothing to decide, unless the new record is the current build's
    (_A, _A, NOW, "skip"),
    (replace(_A, published=9.0), _A, NOW, "skip"),
    (_A, replace(_A, **_OLD), NOW, "take"),
    (replace(_A, **_OLD), _A, NOW, "skip"),
    # another blob: the current build supersedes an older one, by generator or toolchain
    (replace(_A, blob=key("b")), replace(_A, **_OLD), NOW, "take"),
    (replace(_A, blob=key("b"), toolchain_digest="t0"), _A, NOW, "keep"),
    (replace(_A, blob=key("b"), **_OLD), _A, NOW, "keep"),
    # ... and nothing else decides it
    (replace(_A, blob=key("b")), _A, NOW, "conflict"),
    (replace(_A, blob=key("b"), **_OLD), replace(_A, toolchain_digest="t0"), NOW, "conflict"),
    (replace(_A, blob=key("b"), **_OLD), _A, None, "conflict"),
    (replace(_A, blob=key("b")), replace(_A, **_OLD), Digests("g", None), "conflict"),
    # one content key with other bytes is never superseded
    (replace(_A, blob_sha256=key("sha b")), replace(_A, **_OLD), NOW, "conflict"),
])
def test_decide(new, have, current, want):
    assert decide(new, have, current)[0] == want


def test_decide_names_why_it_cannot_choose():
    b = replace(_A, blob=key("b"), blob_sha256=key("sha b"))
    sa, sb = key("sha a")[:12], key("sha b")[:12]
    assert decide(b, _A, NOW)[1] == (
        f"same identity, different content: blob sha256 {sb} vs {sa} from the same "
        "generator g and toolchain t (a non-deterministic build)")
    assert decide(replace(b, **_OLD), replace(_A, toolchain_digest="t0"), NOW)[1] == (
        f"same identity, different content: blob sha256 {sb} vs {sa}, and neither was "
        "built by this tool's generator and toolchain (g, t)")
    assert decide(replace(_A, blob_sha256=key("sha b")), _A, NOW)[1] == (
        f"same identity, different content: content key {key('a')[:16]} names two blobs "
        f"(blob sha256 {sb} vs {sa})")


@pytest.mark.parametrize("order", [("old", "new"), ("new", "old")])
def test_the_current_build_wins_between_two_shards_in_either_order(tmp_path, order):
    _shard(tmp_path / "old", ["1"], **_OLD)
    c = TargetCache(tmp_path / "new", "gfx1250")
    ref = c.write_blob(key("rebuilt"), b"rebuilt bytes")
    new = entry("1", blob=ref.key, blob_size=ref.size, blob_sha256=ref.sha256)
    c.write_entry(new)
    rep = merge([tmp_path / o for o in order], tmp_path / "dest", current=NOW)
    assert (rep.ok, rep.copied_entries, rep.superseded) == (True, 1, 1)
    dest = TargetCache(tmp_path / "dest", "gfx1250")
    assert dest.read_entry(ik("1")) == new
    assert dest.blob_keys() == [ref.key]  # the superseded build's blob is not copied


def test_one_content_key_with_two_blobs_is_a_conflict(tmp_path):
    """Two identities share a blob when their IR is the same: two shards that give that
    content key other bytes disagree, whichever identity they came with."""
    for name, n, data in (("s1", "1", b"one"), ("s2", "2", b"two")):
        c = TargetCache(tmp_path / name, "gfx1250")
        ref = c.write_blob(key("shared"), data)
        c.write_entry(entry(n, blob=ref.key, blob_size=ref.size, blob_sha256=ref.sha256))
    rep = merge([tmp_path / "s1", tmp_path / "s2"], tmp_path / "dest", current=NOW)
    one, two = (TargetCache(tmp_path / s, "gfx1250").read_entry(ik(k)) for s, k in
                (("s1", "1"), ("s2", "2")))
    assert [f.line() for f in rep.findings] == [
        f"CONFLICT gfx1250 x from {tmp_path / 's2'}: content key {key('shared')[:16]}: blob "
        f"sha256 {two.blob_sha256[:12]} here, {one.blob_sha256[:12]} in "
        f"{tmp_path / 's1' / 'gfx1250' / 'entries' / (ik('1') + '.json')} "
        "(a non-deterministic build)"]
    assert not (tmp_path / "dest").exists()


def test_a_missing_source_or_a_file_as_destination_is_bad_input(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match=f"merge source {tmp_path / 'nope'} is not a cache"):
        merge([tmp_path / "nope"], tmp_path / "dest")
    with pytest.raises(ValueError, match="merge destination .*file is not a directory"):
        merge([tmp_path], tmp_path / "file")


def test_a_target_with_its_own_toolchain_is_judged_by_its_digest(tmp_path):
    """sm_90 records carry ptxas's toolchain digest, not the AMD one: of two sm_90 builds of
    one identity, the one with sm_90's current digest supersedes; with the AMD digest
    alone (the rule before) the stale build would have won."""
    from wgradcache.model.spec import KernelSpec

    spec = KernelSpec(target="sm_90", dtype="fp16", dw_dtype="fp16", tile_m=32, tile_n=32,
                      tile_k=32, warp_m=1, warp_n=1, vec_a=8, vec_b=8)
    spec_key = spec.identity_key()
    for name, digest in (("ptx", "p"), ("amd", "t")):
        c = TargetCache(tmp_path / name, "sm_90")
        ref = c.write_blob(key(name), f"cubin {name}".encode())
        c.write_entry(entry(identity=spec.canonical(), target="sm_90", blob=ref.key,
                            blob_size=ref.size, blob_sha256=ref.sha256,
                            toolchain_digest=digest))
    now = Digests(generator="g", toolchain="t", by_target=(("sm_90", "p"),))
    assert now.for_target("sm_90") == Digests("g", "p")
    assert now.for_target("gfx1250") == Digests("g", "t")
    for order in (["amd", "ptx"], ["ptx", "amd"]):
        dest = tmp_path / f"dest-{order[0]}"
        rep = merge([tmp_path / o for o in order], dest, current=now)
        assert rep.ok, rep.findings
        assert TargetCache(dest, "sm_90").read_entry(spec_key).toolchain_digest == "p"
