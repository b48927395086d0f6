"""The store's guarantees that need no compiler: keys, atomic files, corrupt entries."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest

from tests.cache.records import entry, ik, key
from wgradcache.cache.entry import (
    CorruptEntry,
    Entry,
    FailureRecord,
    RejectRecord,
    read_record,
    record_line,
)
from wgradcache.cache.store import TargetCache, atomic_write, content_key

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

    def boom(src, dst, **kw):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        atomic_write(target, b"new")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in target.parent.iterdir()) == ["f.json"]


def _entry(**kw) -> Entry:
    return entry(**kw)


def test_entries_round_trip_and_corrupt_entries_are_reported(tmp_path):
    c = TargetCache(tmp_path, "gfx1250")
    c.write_entry(_entry())
    assert c.read_entry(ik()) == _entry()
    assert c.read_entry("cd" * 32) is None
    path = c.entry_path(ik())
    path.write_bytes(path.read_bytes()[:7])  # truncated
    with pytest.raises(CorruptEntry, match="not whole JSON"):
        c.read_entry(ik())
    assert [type(e) for _, e in c.iter_entries()] == [CorruptEntry]


def _doc(**edit) -> dict:
    return {**json.loads(json.dumps(_entry().__dict__)), **edit}


@pytest.mark.parametrize(("edit", "reason"), [
    ({"blob_size": "64"}, "blob_size: str, not an integer"),
    ({"blob_size": True}, "blob_size: bool, not an integer"),
    ({"blob_size": -1}, "blob_size: -1 is negative"),
    ({"identity": None}, "identity: NoneType, not an object"),
    ({"identity": "gfx1250-fp16"}, "identity: str, not an object"),
    ({"blob": None}, "blob: NoneType, not a string"),
    ({"blob": "../../x"}, "blob: '../../x' is not a key (64 hex digits)"),
    ({"blob": "AB" * 32}, f"blob: {'AB' * 32!r} is not a key (64 hex digits)"),
    ({"identity_key": "ab" * 31}, f"identity_key: {'ab' * 31!r} is not a key "
                                  "(64 hex digits)"),
    ({"isa": "mma=8"}, "isa: str, not an object"),
    ({"isa": {"mma": 8.5}}, "isa: 'mma': float, not an integer"),
    ({"isa": {"mma": [8]}}, "isa: 'mma': list, not an integer"),
    ({"published": "today"}, "published: str, not a number"),
    ({"label": 7}, "label: int, not a string"),
    ({"toolchain": {"llvm": {"x": 1}}}, "toolchain: 'llvm': dict, not a number"),
    ({"codegen_options": [3]}, "codegen_options: list, not an object"),
])
def test_the_entry_reader_names_the_field_of_the_wrong_type(edit, reason):
    with pytest.raises(CorruptEntry) as e:
        read_record(Entry, json.dumps(_doc(**edit)), "e.json")
    assert str(e.value) == f"e.json: corrupt: {reason}"


@pytest.mark.parametrize(("path", "value", "reason"), [
    (("identity", "tile_m"), "32", "identity: tile_m: str, not an integer"),
    (("identity", "target"), "evil", "identity: target: 'evil' is not a target of the "
                                     "catalog"),
    (("identity", "extra"), 1, "identity: unknown field 'extra'"),
    (("code_object", "vgpr_count"), None, "code_object: vgpr_count: NoneType, not an "
                                          "integer"),
    (("code_object", "has_symbol"), 1, "code_object: has_symbol: int, not a boolean"),
    (("code_object", "args"), {"a": 1}, "code_object: args: dict, not a list"),
    (("code_object", "extra"), [1], "code_object: 'extra': list, not a scalar"),
])
def test_the_reader_checks_the_values_inside_nested_objects(path, value, reason):
    doc = _doc()
    doc[path[0]] = {**doc[path[0]], path[1]: value}
    with pytest.raises(CorruptEntry) as e:
        read_record(Entry, json.dumps(doc), "e.json")
    assert str(e.value) == f"e.json: corrupt: {reason}"


def test_the_reader_checks_each_kernel_argument():
    doc = _doc()
    arg = doc["code_object"]["args"][0]
    for bad, reason in (("x", "str, not an object"), ({**arg, "size": "8"},
                                                       "size: str, not an integer"),
                        ({k: v for k, v in arg.items() if k != "name"}, "no field 'name'")):
        doc["code_object"] = {**doc["code_object"], "args": [arg, bad]}
        with pytest.raises(CorruptEntry) as e:
            read_record(Entry, json.dumps(doc), "e.json")
        assert str(e.value) == f"e.json: corrupt: code_object: args[1]: {reason}"
    # the same argument with its keys in another order is whole (the slow path)
    doc["code_object"] = {**doc["code_object"], "args": [dict(reversed(arg.items()))]}
    assert read_record(Entry, json.dumps(doc), "e.json").code_object["args"] == [arg]


@pytest.mark.parametrize(("data", "reason"), [
    (b"\xff\xfe{}", "not UTF-8 (byte 0)"),
    (b"[" * 100_000, "JSON nested too deep"),
    (b'{"published": NaN}', "NaN is not a finite number"),
    (b'{"published": 1e999}', "1e999 is not a finite number"),
    (b"", "not whole JSON (Expecting value at char 0)"),
    (b"[1]", "not a JSON object"),
])
def test_bytes_that_are_not_a_json_object_are_corrupt(data, reason):
    with pytest.raises(CorruptEntry) as e:
        read_record(Entry, data, "e.json")
    assert str(e.value) == f"e.json: corrupt: {reason}"


@pytest.mark.parametrize("target, info, added", [
    ("gfx1250", "codeobject.CodeObjectInfo", {}),
    ("sm_90", "cubin.CubinInfo", {"dynamic_shared_bytes": "int"})])
def test_the_code_object_schema_is_what_the_backend_reads(target, info, added):
    """The backends state their records' fields instead of importing compile/ (pyelftools),
    entry.py the arguments': keep them equal to what the readers' ``record`` writes."""
    import importlib
    from dataclasses import fields

    from wgradcache.cache.entry import KERNEL_ARG_FIELDS
    from wgradcache.compile.codeobject import KernelArg
    from wgradcache.model.backends import backend_of

    module, name = info.split(".")
    cls = getattr(importlib.import_module(f"wgradcache.compile.{module}"), name)
    hints = {**{f.name: f.type for f in fields(cls)}, **added}
    schema = backend_of(target).record_fields
    assert set(schema) == set(hints)
    assert {k: t.__name__ for k, t in schema.items() if k != "args"} == \
        {k: t for k, t in hints.items() if k != "args"}
    assert {k: t.__name__ for k, t in KERNEL_ARG_FIELDS.items()} == \
        {f.name: f.type for f in fields(KernelArg)}


def test_the_entry_reader_names_a_missing_field_and_drops_unknown_ones():
    doc = dict(_entry().__dict__)
    del doc["isa"]
    with pytest.raises(CorruptEntry) as e:
        read_record(Entry, json.dumps(doc), "e.json")
    assert str(e.value) == "e.json: corrupt: no field 'isa'"
    assert read_record(Entry, json.dumps({**_entry().__dict__, "extra": 1}), "e") == _entry()


def test_a_failure_record_from_before_transient_existed_is_retried():
    """Older versions recorded timeouts and worker mismatches as permanent: a record
    without the field reads as transient, so the next build compiles the job again."""
    doc = {"identity_key": "ab" * 32, "label": "x", "reason": "codegen timed out",
           "generator_digest": "g", "toolchain_digest": "t", "when": 1.0}
    assert read_record(FailureRecord, json.dumps(doc), "f").transient is True
    assert read_record(FailureRecord, json.dumps({**doc, "transient": False}),
                       "f").transient is False


def test_blob_write_records_size_and_sha(tmp_path):
    c = TargetCache(tmp_path, "gfx1250")
    ref = c.write_blob(key("k1"), b"\x7fELF" + bytes(60))
    assert (ref.size, len(ref.sha256)) == (64, 64)
    assert c.blob_ref(key("k1")) == ref
    assert c.blob_keys() == [key("k1")]
    assert c.check_blob(key("k1"), 64, ref.sha256) == (True, "")


def test_jsonl_logs_skip_a_torn_last_line(tmp_path):
    c = TargetCache(tmp_path, "gfx1250")
    c.append_stats({"built": 1})
    with open(c.stats_path, "a") as f:
        f.write('{"built": 2, "rea')
    assert c.stats() == [{"built": 1}]


def test_rejects_keep_one_line_per_identity(tmp_path):
    """Every build refuses the same specs again: the file keeps one line per identity (the
    latest reason), drops identities the rules now admit, and is not rewritten when
    nothing changed."""
    c = TargetCache(tmp_path, "gfx1250")
    a, b = (RejectRecord(identity_key=k * 64, label=k, reason="r", toolchain="c" * 64)
            for k in "ab")
    c.record_rejects({a.identity_key: a, b.identity_key: b}, accepted=set())
    mtime = c.rejects_path.stat().st_mtime_ns
    c.record_rejects({a.identity_key: a, b.identity_key: b}, accepted=set())
    assert c.rejects() == [a, b] and c.rejects_path.stat().st_mtime_ns == mtime
    a2 = replace(a, reason="r2")
    c.record_rejects({a.identity_key: a2}, accepted={b.identity_key})
    assert c.rejects() == [a2]
    with open(c.rejects_path, "ab") as f:  # duplicates an older version appended
        f.write(c.rejects_path.read_bytes())
    c.record_rejects({a.identity_key: a2}, accepted=set())
    assert c.rejects() == [a2]


# rejects.jsonl as the writer before ``RejectRecord`` wrote it (inline dicts, ``json.dumps``
# with sorted keys, compact), then a torn line a killed writer left
OLD_REJECTS = (b'{"identity_key":"' + b"a" * 64 + b'","label":"gfx1250-fp16-t64x64x32",'
               b'"reason":"dW dtype \'bf16\' must be fp16 or fp32","toolchain":"'
               + b"c" * 64 + b'"}\n')


def test_an_old_rejects_file_reads_and_rewrites_byte_identically(tmp_path):
    c = TargetCache(tmp_path, "gfx1250")
    c.rejects_path.parent.mkdir(parents=True)
    c.rejects_path.write_bytes(OLD_REJECTS + b'{"identity_key":"ab')
    (old,) = c.rejects()
    assert old == RejectRecord(identity_key="a" * 64, label="gfx1250-fp16-t64x64x32",
                               reason="dW dtype 'bf16' must be fp16 or fp32",
                               toolchain="c" * 64)
    assert record_line(old) == OLD_REJECTS
    new = replace(old, identity_key="b" * 64)
    c.record_rejects({new.identity_key: new}, accepted=set())  # rewrites the file
    assert c.rejects_path.read_bytes() == OLD_REJECTS + record_line(new)


@pytest.mark.parametrize(("line", "why"), [
    (b'{"identity_key":"a","label":"l","reason":"r","toolchain":"' + b"c" * 64 + b'"}',
     "identity_key: 'a' is not a key (64 hex digits)"),
    (b'{"identity_key":"' + b"a" * 64 + b'","label":"l","reason":"r","toolchain":{}}',
     "toolchain: dict, not a string"),
    (b'{"identity_key":"' + b"a" * 64 + b'","label":"l","toolchain":"' + b"c" * 64 + b'"}',
     "no field 'reason'"),
])
def test_a_reject_line_that_is_not_whole_is_refused(line, why):
    with pytest.raises(CorruptEntry) as e:
        read_record(RejectRecord, line, "rejects.jsonl:1")
    assert str(e.value) == f"rejects.jsonl:1: corrupt: {why}"


def test_last_used_stamp_is_explicit(tmp_path):
    c = TargetCache(tmp_path, "gfx1250")
    assert c.last_used(key("k")) == 0.0
    c.stamp_used(key("k"), 123.5)
    assert c.last_used(key("k")) == 123.5
