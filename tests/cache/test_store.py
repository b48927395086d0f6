"""The store's guarantees that need no compiler: keys, atomic files, corrupt entries."""

from __future__ import annotations

import json
import os

import pytest

from wgradcache.cache.store import CorruptEntry, TargetCache, atomic_write, content_key

IR = "define amdgpu_kernel void @wgrad_a() {\n  ret void\n}\n"
TC = {"llvm": "22.1.0", "linker": "LLD 22.1.8"}


def test_content_key_blanks_the_symbol_and_hashes_every_input():
    k = content_key(IR, "wgrad_a", "gfx1250", {"opt": 3}, TC)
    renamed = IR.replace("wgrad_a", "wgrad_b")
    assert content_key(renamed, "wgrad_b", "gfx1250", {"opt": 3}, TC) == k
    assert content_key(IR, "wgrad_a", "gfx1201", {"opt": 3}, TC) != k
    assert content_key(IR, "wgrad_a", "gfx1250", {"opt": 2}, TC) != k
    assert content_key(IR, "wgrad_a", "gfx1250", {"opt": 3}, {**TC, "llvm": "22.1.1"}) != k
    assert content_key(IR + " ", "wgrad_a", "gfx1250", {"opt": 3}, TC) != k
    # the field separator keeps adjacent inputs from running into each other
    assert content_key(IR, "wgrad_a", "gfx125", {"opt": 3}, TC) != k


def test_content_key_ignores_where_the_linker_lives():
    """An ld.lld process in /usr/bin and the in-process LLD of the same version under a
    user's home give the same bytes: they must share blobs."""
    here = {**TC, "linker_path": "/usr/bin/ld.lld-22"}
    k = content_key(IR, "wgrad_a", "gfx1250", {"opt": 3}, here)
    helper = {**here, "linker_path": "/home/u/.cache/wgradcache/native/0f/native.so"}
    assert content_key(IR, "wgrad_a", "gfx1250", {"opt": 3}, helper) == k
    assert content_key(IR, "wgrad_a", "gfx1250", {"opt": 3},
                       {**here, "linker": "LLD 23.0.0"}) != k


def test_atomic_write_leaves_no_temp_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "x" / "f.json"
    atomic_write(target, b"old")

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        atomic_write(target, b"new")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in target.parent.iterdir()) == ["f.json"]


def test_entries_round_trip_and_corrupt_entries_are_reported(tmp_path):
    c = TargetCache(tmp_path, "gfx1250")
    c.write_entry("ab" * 32, {"label": "x", "n": 1})
    assert c.read_entry("ab" * 32) == {"label": "x", "n": 1}
    assert c.read_entry("cd" * 32) is None
    path = c.entry_path("ab" * 32)
    path.write_bytes(path.read_bytes()[:7])  # truncated
    with pytest.raises(CorruptEntry, match="not whole JSON"):
        c.read_entry("ab" * 32)
    assert [type(e) for _, e in c.iter_entries()] == [CorruptEntry]


def test_blob_write_records_size_and_sha(tmp_path):
    c = TargetCache(tmp_path, "gfx1250")
    ref = c.write_blob("k1", b"\x7fELF" + bytes(60))
    assert (ref.size, len(ref.sha256)) == (64, 64)
    assert c.blob_ref("k1") == ref
    assert c.blob_keys() == ["k1"]


def test_jsonl_logs_skip_a_torn_last_line(tmp_path):
    c = TargetCache(tmp_path, "gfx1250")
    c.append_reject({"label": "a", "reason": "r"})
    c.append_stats({"built": 1})
    with open(c.rejects_path, "a") as f:
        f.write('{"label": "b", "rea')
    assert c.rejects() == [{"label": "a", "reason": "r"}]
    assert c.stats() == [{"built": 1}]
    assert json.loads(c.rejects_path.read_text().splitlines()[0])["label"] == "a"


def test_last_used_stamp_is_explicit(tmp_path):
    c = TargetCache(tmp_path, "gfx1250")
    assert c.last_used("k") == 0.0
    c.stamp_used("k", 123.5)
    assert c.last_used("k") == 123.5
