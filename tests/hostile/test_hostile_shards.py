"""``wgradcache merge`` on malicious shards: each shard is a copy of a real small cache with
one attack in it. Merge must refuse it with one line per finding and exit 1, write nothing
outside the destination (a canary folder beside it, hashed file by file, stays the same)
and nothing into it (the destination, a cache that lacks the bf16 half, stays the same).
The clean shard merges into the same destination, so a refusal is the attack's doing.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.hostile.conftest import deadline
from wgradcache.cache.entry import Entry, Stage2Entry
from wgradcache.cache.store import TargetCache, sha256_bytes
from wgradcache.cli import main
from wgradcache.pipeline.merge import current_digests

T = "gfx1250"
FAILED = "failed: {} finding(s): nothing merged"


def _tree(root: Path) -> dict[str, tuple]:
    """Every path under ``root`` (nothing followed): a file by its sha256 and mode, a link
    by its target, a folder by its mode."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(dirpath, name)
            st = os.lstat(p)
            rel = str(p.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISREG(st.st_mode):
                out[rel] = ("file", hashlib.sha256(p.read_bytes()).hexdigest(), st.st_mode)
            else:
                out[rel] = ("other", st.st_mode)
    return out


class Scene:
    """tmp/canary (files an attack would read or overwrite), tmp/dest (the small cache
    without its bf16 entries, blobs and stage-2 kernel), tmp/shard (the whole small cache,
    for the test to poison)."""

    def __init__(self, small_cache: dict, tmp: Path):
        self.tmp = tmp
        self.canary = tmp / "canary"
        (self.canary / "sub").mkdir(parents=True)
        (self.canary / "secret.txt").write_bytes(b"the deploy key\n")
        (self.canary / "x").write_bytes(b"not yours to overwrite\n")
        (self.canary / "sub" / "y.hsaco").write_bytes(b"\x7fELF nor this\n")
        self.shard = tmp / "shard"
        shutil.copytree(small_cache["cache"], self.shard)
        self.dest = tmp / "dest"
        shutil.copytree(small_cache["cache"], self.dest)
        d = TargetCache(self.dest, T)
        for ik, e in d.iter_entries():
            if e.dtype == "bf16":
                d.remove_entry(ik)
                d.remove_blob(e.blob)
        s2 = d.read_stage2("bf16-wsr8")
        d.remove_stage2("bf16-wsr8")
        d.remove_blob(s2.blob)
        self.s = TargetCache(self.shard, T)
        self.before = (_tree(self.canary), _tree(self.dest))

    def entry(self, dtype: str = "bf16", variant: str = "sync.default.none") -> Entry:
        return next(e for _, e in self.s.iter_entries()
                    if e.dtype == dtype and e.variant == variant)

    def write_json(self, path: Path, doc: dict) -> None:
        path.write_text(json.dumps(doc))

    def merge(self, *extra: str):
        return CliRunner().invoke(main, ["merge", str(self.shard), *extra,
                                         "--into", str(self.dest)])

    def refused(self, lines: list[str]) -> None:
        """Merge exits 1 with exactly ``lines`` and the closing line on stderr, and neither
        the canary nor the destination changed."""
        r = self.merge()
        assert (r.exit_code, r.stdout) == (1, ""), r.output
        assert r.stderr.splitlines() == [*lines, FAILED.format(len(lines))]
        self.unchanged()

    def unchanged(self) -> None:
        assert (_tree(self.canary), _tree(self.dest)) == self.before


@pytest.fixture
def scene(small_cache, tmp_path) -> Scene:
    return Scene(small_cache, tmp_path)


def test_the_clean_shard_merges_into_the_destination(scene, small_cache):
    """The control: without an attack the same merge goes through and writes the bf16 half."""
    r = scene.merge()
    assert (r.exit_code, r.stderr) == (0, ""), r.output
    assert r.stdout == ("merged 9 entries and 1 stage-2 kernels (10 blobs), 9 already "
                        "present, 0 superseded\n")
    assert _tree(scene.canary) == scene.before[0]
    whole = _tree(small_cache["cache"])
    got = _tree(scene.dest)
    for rel, v in whole.items():
        if rel.startswith((f"{T}/entries", f"{T}/blobs", f"{T}/stage2")):
            assert got.get(rel) == v, rel


def test_a_blob_field_that_climbs_out_of_the_cache_is_refused(scene):
    e = scene.entry()
    path = scene.s.entry_path(e.identity_key)
    doc = json.loads(path.read_text())
    doc["blob"] = "../../../canary/x"
    scene.write_json(path, doc)
    scene.refused([f"REFUSED {path}: corrupt: blob: '../../../canary/x' is not a key "
                   "(64 hex digits)"])


@pytest.mark.parametrize("folder", ["blobs", "entries", "used", "stage2"])
def test_a_symlinked_folder_in_the_shard_is_refused(scene, folder):
    """A folder of the shard pointing at the canary: nothing is read or written through it
    (a stamp through ``used/`` would land in the canary)."""
    d = scene.s.dir / folder
    shutil.rmtree(d)
    d.symlink_to(scene.canary, target_is_directory=True)
    scene.refused([f"REFUSED {d}: a symbolic link, not a directory: not followed out of "
                   "the cache (remove it)"])


def test_a_symlinked_target_folder_is_refused(scene):
    moved = scene.tmp / "elsewhere"
    scene.s.dir.rename(moved)
    scene.s.dir.symlink_to(moved, target_is_directory=True)
    scene.refused([f"REFUSED {scene.s.dir}: a symbolic link, not followed: not merged"])


def test_a_blob_that_is_a_symlink_to_a_secret_is_refused(scene):
    """The entry records the secret's size and sha256, so only the link gives it away."""
    e = scene.entry()
    secret = (scene.canary / "secret.txt").read_bytes()
    blob = scene.s.blob_path(e.blob)
    blob.unlink()
    blob.symlink_to(scene.canary / "secret.txt")
    scene.s.write_entry(replace(e, blob_size=len(secret), blob_sha256=sha256_bytes(secret)))
    scene.refused([f"REFUSED {scene.s.entry_path(e.identity_key)}: {blob}: corrupt: a "
                   "symbolic link, not a regular file"])


def test_an_entry_that_is_a_symlink_to_a_secret_is_refused(scene):
    e = scene.entry()
    path = scene.s.entry_path(e.identity_key)
    secret = scene.canary / "secret.json"
    secret.write_bytes(path.read_bytes())  # a whole entry, but not the shard's file
    scene.before = (_tree(scene.canary), scene.before[1])
    path.unlink()
    path.symlink_to(secret)
    scene.refused([f"REFUSED {path}: corrupt: a symbolic link, not a regular file "
                   "(not followed)"])


def test_a_sidecar_that_is_a_symlink_to_a_secret_is_refused(scene):
    e = scene.entry()
    side = scene.s.sidecar_path(e.blob)
    side.unlink()
    side.symlink_to(scene.canary / "secret.txt")
    scene.refused([f"REFUSED {scene.s.entry_path(e.identity_key)}: {side}: corrupt: a "
                   "symbolic link, not a regular file (not followed)"])


def _other_bytes(cache: TargetCache, rec: Entry | Stage2Entry, name: str, **digests):
    """``rec`` re-pointed at a new blob of other bytes (its last byte flipped), with its
    sidecar, under the key ``name`` stands for; ``digests`` replace the record's."""
    data = bytearray(cache.read_blob(rec.blob))
    data[-1] ^= 0xFF
    meta = replace(cache.read_sidecar(rec.blob), blob_size=len(data),
                   blob_sha256=hashlib.sha256(bytes(data)).hexdigest())
    ref = cache.write_blob(hashlib.sha256(name.encode()).hexdigest(), bytes(data), meta)
    return replace(rec, blob=ref.key, blob_size=ref.size, blob_sha256=ref.sha256, **digests)


def test_a_different_stage2_record_is_a_conflict(scene):
    d = TargetCache(scene.dest, T)
    ours = d.read_stage2("fp16-wsr8")
    theirs = _other_bytes(scene.s, scene.s.read_stage2("fp16-wsr8"), "other stage-2")
    scene.s.write_stage2(theirs)
    scene.refused([f"CONFLICT {T} fp16-wsr8 from {scene.shard}: same identity, different "
                   f"content: blob sha256 {theirs.blob_sha256[:12]} vs "
                   f"{ours.blob_sha256[:12]} from the same generator "
                   f"{ours.generator_digest[:12]} and toolchain {ours.toolchain_digest[:12]} "
                   "(a non-deterministic build)"])


def test_an_entry_without_a_blob_field_is_refused_before_any_entry_is_written(scene):
    """The last entry in key order is the broken one, so an entry-by-entry merge would have
    written the eight bf16 entries before it."""
    keys = [ik for ik, e in scene.s.iter_entries() if e.dtype == "bf16"]
    path = scene.s.entry_path(keys[-1])
    doc = json.loads(path.read_text())
    del doc["blob"]
    scene.write_json(path, doc)
    scene.refused([f"REFUSED {path}: corrupt: no field 'blob'"])


@pytest.mark.parametrize("how", ["other-entry", "schema-2"])
def test_an_entry_that_is_not_what_its_name_says_is_refused(scene, how):
    """Another bf16 kernel's whole entry under this one's name (its key field rewritten to
    match), or this identity under a schema this version does not read: merging it would
    publish one kernel as another."""
    e = scene.entry()
    path = scene.s.entry_path(e.identity_key)
    if how == "other-entry":
        other = scene.entry(variant="sync.cshuffle.none")
        doc = json.loads(scene.s.entry_path(other.identity_key).read_text())
        why = (f"identity: hashes to {other.identity_key[:16]}, not to the entry's key "
               f"{e.identity_key[:16]}")
    else:
        doc = json.loads(path.read_text())
        doc["identity"]["schema"] = 2
        why = "identity: schema 2 is not one this version reads (1)"
    scene.write_json(path, {**doc, "identity_key": e.identity_key})
    scene.refused([f"REFUSED {path}: corrupt: {why}"])


def test_a_fifo_entry_and_links_to_dev_zero_do_not_hang(scene):
    a, b, c = (scene.entry(variant=v) for v in (
        "sync.default.none", "sync.default.atomic", "sync.cshuffle.none"))
    fifo = scene.s.entry_path(a.identity_key)
    fifo.unlink()
    os.mkfifo(fifo)
    zero = scene.s.blob_path(b.blob)
    zero.unlink()
    zero.symlink_to("/dev/zero")
    blob_fifo = scene.s.blob_path(c.blob)
    blob_fifo.unlink()
    os.mkfifo(blob_fifo)
    stamp = scene.s.used / c.blob
    stamp.unlink()
    stamp.symlink_to("/dev/zero")
    expected = {a.identity_key: f"REFUSED {fifo}: corrupt: a FIFO, not a regular file "
                                "(not followed)",
                b.identity_key: f"REFUSED {scene.s.entry_path(b.identity_key)}: {zero}: "
                                "corrupt: a symbolic link, not a regular file",
                c.identity_key: f"REFUSED {scene.s.entry_path(c.identity_key)}: {blob_fifo}: "
                                "corrupt: a FIFO, not a regular file"}
    with deadline(60, "merge still running"):
        scene.refused([expected[k] for k in sorted(expected)])


def test_an_8_gb_sparse_blob_is_never_opened(scene, monkeypatch):
    """The entry records the 8 GB, so the size agrees and only the cap refuses it, without
    opening the file: reading it would take 8 GB of memory."""
    e = scene.entry()
    blob = scene.s.blob_path(e.blob)
    os.truncate(blob, 8 << 30)
    scene.s.write_entry(replace(e, blob_size=8 << 30))
    opened = []
    real = os.open
    monkeypatch.setattr(os, "open", lambda p, *a, **k: opened.append(str(p)) or real(p, *a,
                                                                                    **k))
    scene.refused([f"REFUSED {scene.s.entry_path(e.identity_key)}: {blob}: corrupt: "
                   f"{8 << 30} bytes, over the 64 MiB cap"])
    assert opened and str(blob) not in opened


def test_a_target_folder_not_in_the_catalog_is_refused(scene):
    shutil.copytree(scene.s.dir, scene.shard / "evil")
    scene.refused([f"REFUSED {scene.shard / 'evil'}: not a target of the catalog: not merged"])
    assert not (scene.dest / "evil").exists()


def test_a_blob_whose_bytes_are_not_its_sha256_is_refused(scene):
    e = scene.entry()
    blob = scene.s.blob_path(e.blob)
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0x01
    blob.write_bytes(bytes(data))
    scene.refused([f"REFUSED {scene.s.entry_path(e.identity_key)}: blob {e.blob[:16]} does "
                   "not hash to the sha256 its entry records"])


def test_a_two_stage_entry_without_its_stage2_kernel_is_refused(scene):
    e = scene.entry(variant="sync.default.two_stage")
    scene.s.remove_stage2("bf16-wsr8")
    scene.refused([f"REFUSED {scene.s.entry_path(e.identity_key)}: a two-stage entry whose "
                   "stage-2 kernel bf16-wsr8 neither a source nor the destination holds"])


@pytest.mark.parametrize("field", ["generator_digest", "toolchain_digest"])
def test_an_older_build_in_the_destination_is_superseded(scene, field):
    """The nightly after a generator or LLVM change: the destination holds last night's
    build of a kernel (other bytes, an older digest); the shard's, built by this tool's
    generator and toolchain, replaces it and the merge goes through."""
    d = TargetCache(scene.dest, T)
    current = current_digests()
    e = scene.entry("fp16")
    assert (e.generator_digest, e.toolchain_digest) == (current.generator, current.toolchain)
    d.write_entry(_other_bytes(d, e, "last night", **{field: "0" * 64}))
    r = scene.merge()
    assert (r.exit_code, r.stderr) == (0, ""), r.output
    assert r.stdout == ("merged 10 entries and 1 stage-2 kernels (10 blobs), 8 already "
                        "present, 1 superseded\n")
    assert d.read_entry(e.identity_key) == e
    assert d.check_blob(e.blob, e.blob_size, e.blob_sha256) == (True, "")
    assert _tree(scene.canary) == scene.before[0]


def test_an_older_build_in_the_shard_is_superseded_by_the_destinations(scene):
    d = TargetCache(scene.dest, T)
    e = scene.entry("fp16")
    scene.s.write_entry(_other_bytes(scene.s, e, "older shard", generator_digest="0" * 64))
    r = scene.merge()
    assert (r.exit_code, r.stderr) == (0, ""), r.output
    assert r.stdout == ("merged 9 entries and 1 stage-2 kernels (10 blobs), 8 already "
                        "present, 1 superseded\n")
    assert d.read_entry(e.identity_key) == e


def test_same_digests_different_bytes_is_a_conflict(scene):
    """Builds are byte-deterministic: other bytes from the same generator and toolchain
    mean one of the two builds is wrong, and nobody can say which."""
    e = scene.entry("fp16")
    theirs = _other_bytes(scene.s, e, "nondeterministic")
    scene.s.write_entry(theirs)
    scene.refused([f"CONFLICT {T} {e.label} from {scene.shard}: same identity, different "
                   f"content: blob sha256 {theirs.blob_sha256[:12]} vs {e.blob_sha256[:12]} "
                   f"from the same generator {e.generator_digest[:12]} and toolchain "
                   f"{e.toolchain_digest[:12]} (a non-deterministic build)"])


def test_a_sidecar_that_disagrees_with_its_entry_is_refused(scene):
    """A relink copies the sidecar's figures into new entries: one that says other things
    than the entry it came with would spread them."""
    e = scene.entry()
    side = scene.s.sidecar_path(e.blob)
    doc = json.loads(side.read_text())
    doc["isa"] = {**doc["isa"], "mma": doc["isa"]["mma"] + 1}
    scene.write_json(side, doc)
    scene.refused([f"REFUSED {scene.s.entry_path(e.identity_key)}: {side}: its isa is not "
                   "the record's"])


def test_a_sidecar_that_vouches_for_other_bytes_is_refused(scene):
    """A sidecar's size and sha256 prove its blob to a later relink: one that names other
    bytes than the entry's would let a relink trust them."""
    e = scene.entry()
    side = scene.s.sidecar_path(e.blob)
    doc = json.loads(side.read_text())
    doc["blob_sha256"] = "ab" * 32
    scene.write_json(side, doc)
    scene.refused([f"REFUSED {scene.s.entry_path(e.identity_key)}: {side}: its "
                   "blob_sha256/blob_size is not the record's"])


def test_a_symlinked_folder_in_the_destination_is_refused(scene):
    """Merge would stamp ``used/`` of the copied blobs: through a link, into the canary."""
    used = scene.dest / T / "used"
    shutil.rmtree(used)
    used.symlink_to(scene.canary, target_is_directory=True)
    scene.before = (scene.before[0], _tree(scene.dest))
    scene.refused([f"REFUSED {used}: a symbolic link, not a directory: not followed out of "
                   "the cache (remove it)"])


def test_a_corrupt_destination_entry_that_a_shard_names_is_refused(scene):
    e = scene.entry("fp16")
    path = TargetCache(scene.dest, T).entry_path(e.identity_key)
    path.write_text("{}")
    scene.before = (scene.before[0], _tree(scene.dest))
    scene.refused([f"REFUSED {path}: corrupt: no field 'identity_key' (the destination's; "
                   "remove it, or run gc)"])


def test_a_missing_source_or_a_file_as_destination_is_bad_input(scene):
    for args, line in [
        ([str(scene.tmp / "nope"), "--into", str(scene.dest)],
         f"error: merge source {scene.tmp / 'nope'} is not a cache directory"),
        ([str(scene.shard), "--into", str(scene.canary / "x")],
         f"error: merge destination {scene.canary / 'x'} is not a directory"),
    ]:
        r = CliRunner().invoke(main, ["merge", *args])
        assert (r.exit_code, r.stdout, r.stderr) == (2, "", line + "\n")
    scene.unchanged()


def test_json_lists_the_findings_and_exits_1(scene):
    shutil.copytree(scene.s.dir, scene.shard / "evil")
    r = scene.merge("--json")
    assert (r.exit_code, r.stderr) == (1, FAILED.format(1) + "\n")
    doc = json.loads(r.stdout)
    assert (doc["ok"], doc["copied_entries"], doc["lines"]) == (
        False, 0, [f"REFUSED {scene.shard / 'evil'}: not a target of the catalog: not merged"])
    assert doc["findings"][0]["kind"] == "refused"
    scene.unchanged()
