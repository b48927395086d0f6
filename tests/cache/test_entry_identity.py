"""The entry reader and the identity fields ``canonical`` leaves out at their default."""

from __future__ import annotations

import dataclasses
import json

import pytest
from records import SPEC, entry

from wgradcache.cache.entry import CorruptEntry, Entry, read_record, record_bytes
from wgradcache.model.spec import KernelSpec


def test_a_grouped_identity_reads_back_as_its_spec():
    grouped = dataclasses.replace(SPEC, cta_group=8)
    e = read_record(Entry, record_bytes(entry(identity=grouped.canonical())), "e.json")
    assert KernelSpec.from_dict(e.identity) == grouped
    assert e.identity_key == grouped.identity_key() != SPEC.identity_key()


@pytest.mark.parametrize(("value", "why"), [
    (1, "identity: cta_group: 1 is its default, which a canonical identity leaves out"),
    ("8", "identity: cta_group: str, not an integer"),
    (True, "identity: cta_group: bool, not an integer"),
])
def test_an_identity_that_spells_out_the_default_order_or_mistypes_it_is_corrupt(value, why):
    """Two identities (and keys) for one kernel would let a copied entry pose as it."""
    doc = json.loads(record_bytes(entry()))
    doc["identity"]["cta_group"] = value
    with pytest.raises(CorruptEntry) as e:
        read_record(Entry, json.dumps(doc), "e.json")
    assert str(e.value) == f"e.json: corrupt: {why}"


def test_a_deeper_ring_identity_reads_back_and_two_stages_spelled_out_is_corrupt():
    ring = dataclasses.replace(SPEC, k_loop="async", vec_a=0, vec_b=0, chunk_a=16,
                               chunk_b=16, stages=3)
    e = read_record(Entry, record_bytes(entry(identity=ring.canonical())), "e.json")
    assert KernelSpec.from_dict(e.identity) == ring
    doc = json.loads(record_bytes(entry()))
    doc["identity"]["stages"] = 2
    with pytest.raises(CorruptEntry) as err:
        read_record(Entry, json.dumps(doc), "e.json")
    assert str(err.value) == ("e.json: corrupt: identity: stages: 2 is its default, which a "
                              "canonical identity leaves out")
