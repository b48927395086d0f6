"""``verify --level numerics --no-reproduce`` (a device machine without the build's toolchain)
compiles nothing, so what binds an entry to its bytes is structure's reading of the blob.
The attack: another kernel's binary (same tile, other vector widths) renamed to this kernel's
symbol, byte for byte wherever the name occurs, and every field of the entry that describes
the binary (size, sha256, symbol, code object, ISA figures) rewritten to match. Every check
on names and on the entry's word holds; the loads per K step the spec's widths make do not.
"""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from wgradcache.cache.store import TargetCache, sha256_bytes
from wgradcache.cli import main

T = "gfx1250"
WIDE = "gfx1250-fp16-t32x32x32-w1x1-v8x8-sync-default-none"
NARROW = "gfx1250-fp16-t32x32x32-w1x1-v4x4-sync-default-none"
VERIFY = ["verify", "--from-cache", "--level", "numerics", "--no-reproduce", "--device",
          "emulator", "--json"]


@pytest.fixture(scope="module")
def two_entries(tmp_path_factory):
    """The first two jobs of the shipped walk: the same kernel at v8x8 and at v4x4."""
    root = tmp_path_factory.mktemp("two") / "cache"
    r = CliRunner().invoke(main, ["build", "--target", T, "--limit", "2", "--cache-dir",
                                  str(root), "--json"])
    assert r.exit_code == 0, r.output
    labels = sorted(e.label for _, e in TargetCache(root, T).iter_entries())
    assert labels == [NARROW, WIDE]
    return root


def _verify(root) -> tuple[int, dict]:
    r = CliRunner().invoke(main, [*VERIFY, "--cache-dir", str(root)])
    return r.exit_code, json.loads(r.stdout)


def test_the_honest_pair_passes_numerics_without_reproduce(two_entries):
    code, doc = _verify(two_entries)
    assert (code, doc["failed"], [n["status"] for n in doc["numerics"]]) == (
        0, 0, ["passed", "passed"])


def test_another_specs_binary_renamed_and_recorded_is_refused(two_entries, tmp_path):
    root = tmp_path / "cache"
    shutil.copytree(two_entries, root)
    c = TargetCache(root, T)
    by_label = {e.label: e for _, e in c.iter_entries()}
    wide, narrow = by_label[WIDE], by_label[NARROW]
    assert len(wide.symbol) == len(narrow.symbol)
    data = c.read_blob(wide.blob)
    assert data.count(wide.symbol.encode()) > 1  # symbol table and metadata note alike
    data = data.replace(wide.symbol.encode(), narrow.symbol.encode())
    c.blob_path(narrow.blob).write_bytes(data)
    path = c.entry_path(narrow.identity_key)
    doc = json.loads(path.read_bytes())
    doc.update(blob_size=len(data), blob_sha256=sha256_bytes(data), isa=wide.isa,
               code_object={**wide.code_object, "symbol": narrow.symbol})
    path.write_text(json.dumps(doc))

    code, doc = _verify(root)
    assert code == 1
    assert [(f["label"], f["level"], f["reason"]) for f in doc["failures"]] == [
        (NARROW, "structure", "8 global loads per K step, the spec's widths make 16")]
    assert [n["label"] for n in doc["numerics"]] == [WIDE]  # the forged one never ran


def test_the_help_says_what_no_reproduce_leaves_unproven():
    r = CliRunner().invoke(main, ["verify", "--help"], terminal_width=200)
    text = " ".join(r.stdout.split())
    assert "--no-reproduce" in text
    assert ("not proven that the bytes are the compile of that IR" in text
            and "in the emulator numerics run the IR, not the binary" in text), text
