"""Hypothesis fuzz of the cache's typed reader (``cache/entry.py``): whatever a record file
holds, ``read_record`` returns a whole record or raises the one documented error, a
one-line ``CorruptEntry`` that starts with the file's name; and every record the writer
writes reads back equal, field for field.

The inputs: a whole record with one field, anywhere in it (the nested identity, code
object, kernel arguments, ISA figures, toolchain, options too), replaced by a value of
another type or size (None, booleans, huge and negative integers, NaN and infinities,
long, control-character and non-key strings, lists, objects, nesting a thousand deep),
deleted, or joined by an unknown field; the record's bytes truncated, a byte flipped,
non-UTF-8 bytes put in; and bytes that are not a record at all."""

from __future__ import annotations

import copy
import json
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.cache.records import CODE_OBJECT, entry, key
from wgradcache.cache.entry import (
    BlobMeta,
    CorruptEntry,
    Entry,
    FailureRecord,
    Stage2Entry,
    read_record,
    record_bytes,
)

WHERE = "/c/gfx1250/entries/x.json"
FUZZ = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])

_ARGS = [{"name": f"a{i}", "offset": 8 * i, "size": 8, "value_kind": "global_buffer"}
         for i in range(6)] + [{"name": "", "offset": 48, "size": 8,
                                "value_kind": "hidden_block_count_x"}]
GOOD = {
    Entry: entry(code_object={**CODE_OBJECT, "args": _ARGS, "symbol": "wgrad_x",
                              "has_symbol": True},
                 isa={"mma": 8, "barriers": 2, "main_loop_mma": 4}),
    Stage2Entry: Stage2Entry(name="fp16-wsr8", dw_dtype="fp16", ws_replicas=8,
                             symbol="wgrad_stage2_fp16_wsr8", blob=key("s2"), blob_size=900,
                             blob_sha256=key("s2 bytes"), block_size=256,
                             code_object=CODE_OBJECT, isa={"mma": 0},
                             generator_digest="g", toolchain_digest="t"),
    BlobMeta: BlobMeta(code_object=CODE_OBJECT, isa={"mma": 8}, listing="disassembly",
                       blob_size=900, blob_sha256=key("blob bytes")),
    FailureRecord: FailureRecord(identity_key=key("f"), label="x", reason="LLVM said no",
                                 generator_digest="g", toolchain_digest="t", when=1.5,
                                 transient=False),
}
KINDS = list(GOOD)


def _deep(n: int):
    v: object = 1
    for _ in range(n):
        v = [v]
    return v


# What a hand edit, another version or an attacker puts where a field was.
HOSTILE = st.one_of(
    st.none(), st.booleans(),
    st.integers(-(2 ** 80), 2 ** 80), st.sampled_from([-1, 0, 2 ** 63, 10 ** 300]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf]),
    st.text(max_size=30), st.text(alphabet="\n\r\x1b\x00[]:;", min_size=1, max_size=8),
    st.sampled_from(["0" * 64, "A" * 64, "g" * 64, "../../x", "ab" * 33, "x" * 100_000]),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.one_of(st.integers(), st.text(max_size=3),
                                                   st.lists(st.none(), max_size=2)),
                    max_size=3),
    st.sampled_from([_deep(50), _deep(1000), {"a": {"b": {"c": []}}}]),
)


def _paths(node, prefix=()):
    """Every path in a JSON document, containers too."""
    yield prefix
    items = node.items() if isinstance(node, dict) else \
        enumerate(node) if isinstance(node, list) else ()
    for k, v in items:
        yield from _paths(v, (*prefix, k))


def _doc(cls) -> dict:
    return json.loads(record_bytes(GOOD[cls]))


PATHS = {cls: [p for p in _paths(_doc(cls)) if p] for cls in KINDS}


def _dump(doc) -> bytes:
    # allow_nan: NaN and Infinity tokens are what a hostile file may hold
    try:
        return json.dumps(doc, allow_nan=True).encode()
    except RecursionError:  # a value too deep for json.dumps itself: written by hand
        return b"[" * 100_000 + b"]" * 100_000


@st.composite
def mutated(draw) -> tuple[type, bytes]:
    cls = draw(st.sampled_from(KINDS))
    doc = copy.deepcopy(_doc(cls))
    good = record_bytes(GOOD[cls])
    how = draw(st.sampled_from(["replace", "delete", "add", "truncate", "flip",
                                "not_utf8", "garbage", "not_an_object"]))
    if how in ("replace", "delete", "add"):
        path = draw(st.sampled_from(PATHS[cls]))
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        if how == "replace":
            parent[path[-1]] = draw(HOSTILE)
        elif how == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=12))] = draw(HOSTILE)
        else:
            parent.append(draw(HOSTILE))
        return cls, _dump(doc)
    if how == "truncate":
        return cls, good[:draw(st.integers(0, len(good) - 1))]
    if how == "flip":
        i = draw(st.integers(0, len(good) - 1))
        return cls, good[:i] + bytes([good[i] ^ draw(st.integers(1, 255))]) + good[i + 1:]
    if how == "not_utf8":
        i = draw(st.integers(0, len(good)))
        return cls, good[:i] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80",
                                                     b"\x80\x80"])) + good[i:]
    if how == "garbage":
        return cls, draw(st.binary(max_size=200))
    return cls, _dump(draw(HOSTILE))


def _read(cls, data: bytes):
    """The record, or the CorruptEntry; any other exception fails the test."""
    try:
        return read_record(cls, data, WHERE)
    except CorruptEntry as e:
        return e


@FUZZ
@given(mutated())
def test_a_mutated_record_is_whole_or_one_corrupt_line(case):
    cls, data = case
    got = _read(cls, data)
    if isinstance(got, CorruptEntry):
        text = str(got)
        assert text.startswith(f"{WHERE}: corrupt: "), text
        assert "\n" not in text and "\r" not in text and len(text) < 400, text
        return
    # accepted: a whole record of its type, which the writer writes back as it was read
    assert type(got) is cls
    assert read_record(cls, record_bytes(got), WHERE) == got


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(KINDS), st.data())
def test_good_records_round_trip_exactly(cls, data):
    """A record with other valid values (sizes, keys, figures, text) reads back equal, and
    its bytes are the writer's, byte for byte."""
    base = GOOD[cls]
    edits = {}
    if hasattr(base, "blob_size"):
        edits["blob_size"] = data.draw(st.integers(0, 2 ** 62))
    if hasattr(base, "blob"):
        edits["blob"] = data.draw(st.text("0123456789abcdef", min_size=64, max_size=64))
    if hasattr(base, "isa"):
        edits["isa"] = data.draw(st.dictionaries(st.text(min_size=1, max_size=20),
                                                 st.integers(0, 2 ** 40), max_size=8))
    if hasattr(base, "reason"):
        edits["reason"] = data.draw(st.text(max_size=200))
    if hasattr(base, "when"):
        edits["when"] = data.draw(st.floats(0, 1e12, allow_nan=False))
    record = type(base)(**{**base.__dict__, **edits})
    raw = record_bytes(record)
    back = read_record(cls, raw, WHERE)
    assert back == record and record_bytes(back) == raw


def test_cases_the_fuzz_must_keep_refusing_in_one_line():
    """NaN, a 5000-digit integer (past Python's conversion limit), and keys holding a
    newline, which a reason quotes escaped."""
    doc = _doc(Entry)
    digits = json.dumps({**doc, "blob_size": 1}).replace('"blob_size": 1', '"blob_size": '
                                                         + "9" * 5000)
    for raw, reason in [
        (json.dumps({**doc, "published": math.nan}), "NaN is not a finite number"),
        (digits, "Exceeds the limit (4300 digits) for integer string conversion: value has "
                 "5000 digits; use sys.set_int_max_str_digits() to increase the limit"),
        (json.dumps({**doc, "isa": {"m\nma": "8"}}), "isa: 'm\\nma': str, not an integer"),
        (json.dumps({**doc, "toolchain": {"x\ny": [1]}}),
         "toolchain: 'x\\ny': list, not a number"),
        (json.dumps({**doc, "identity": {**doc["identity"], "e\nx": 1}}),
         "identity: unknown field 'e\\nx'"),
        (json.dumps({**doc, "code_object": {**doc["code_object"], "e\nx": []}}),
         "code_object: 'e\\nx': list, not a scalar"),
    ]:
        got = _read(Entry, raw.encode())
        assert str(got) == f"{WHERE}: corrupt: {reason}"
