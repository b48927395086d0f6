"""Every command on a corrupt or hostile cache: each test copies the small cache, plants one
thing in it (a record that is not whole, a file that is not a file, a symlinked folder, a
folder the catalog does not know, a lock that is a directory, a read-only or full disk),
and asserts the exact lines, the documented exit code, that a canary folder beside the
cache is byte for byte unchanged and that nothing in the cache was lost.

Exit codes: 0 for a read that could answer (ls, gc --dry-run, select, an up-to-date build:
the corrupt record is reported on stderr, one line), 1 for a check that found it (verify)
or a write that failed, 2 for a cache layout refused (a symlinked folder, a cache dir that
is not a directory) and for the record a command was asked about (show, explain).

Nothing here may hang: FIFOs and /dev/zero are planted, and every command runs under an
alarm that fails the test instead of blocking the suite.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.hostile.conftest import deadline, tree
from wgradcache.cache.store import TargetCache
from wgradcache.cli import main
from wgradcache.model.spec import KernelSpec
from wgradcache.pipeline.verify import probe_problem

T = "gfx1250"
VERIFY_FAILED = "failed: verify found failures or entries no --problem covers"


def select_skipped(line: str, n: int = 1) -> str:
    """select's one stderr line for ``n`` entries it did not serve, ``line`` the first."""
    return (f"select: skipped {n} corrupt entr{'y' if n == 1 else 'ies'} (not served), e.g. "
            f"{line} (`wgradcache verify` lists them, `wgradcache build` mends them)")


class Scene:
    """``<tmp>/cache``: a copy of the small cache; ``<tmp>/canary`` beside it. ``e`` is the
    fp16 sync.default.none entry the tests poison, ``path`` its file, ``blob`` its blob."""

    def __init__(self, small_cache: dict, tmp: Path, canary):
        self.root = tmp / "cache"
        shutil.copytree(small_cache["cache"], self.root, symlinks=True)
        self.geo = str(small_cache["geometries"])
        self.canary = canary
        self.c = TargetCache(self.root, T)
        self.e = next(e for _, e in self.c.iter_entries()
                      if e.dtype == "fp16" and e.variant == "sync.default.none")
        self.path = self.c.entry_path(self.e.identity_key)
        self.blob = self.c.blob_path(self.e.blob)
        self.blob_bytes = self.blob.read_bytes()
        self.problem = probe_problem(KernelSpec.from_dict(self.e.identity)).short()
        self.tdir = self.root / T

    def seal(self) -> None:
        """What the test planted is the state every read-only command must leave."""
        self.canary.seal()
        self.before = tree(self.root)

    def args(self, command: str) -> list[str]:
        return {
            "ls": ["ls"],
            "verify": ["verify", "--from-cache", "--level", "integrity",
                       "--geometries", self.geo],
            "gc": ["gc", "--dry-run", "--geometries", self.geo],
            "select": ["select", "--target", T, "--problem", self.problem, "--json"],
            "show": ["show", self.e.label],
            "explain": ["explain", self.e.label],
            "build": ["build", "--target", T, "--geometries", self.geo, "--dtype", "fp16",
                      "--dtype", "bf16", "--json"],
        }[command]

    def cli(self, *args: str, cache_dir: str | None = None):
        with deadline():
            return CliRunner().invoke(main, [*args, "--cache-dir",
                                             cache_dir or str(self.root)])

    def run(self, command: str):
        return self.cli(*self.args(command))

    def unchanged(self) -> bool:
        return self.canary.unchanged() and tree(self.root) == self.before

    def served(self, r) -> list[str]:
        return [c["label"] for c in json.loads(r.stdout)["candidates"]]

    def skipped(self, r) -> tuple[int, list[str]]:
        doc = json.loads(r.stdout)
        return doc["skipped_corrupt"], doc["skipped"]

    def summary(self, r) -> dict:
        return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture
def scene(small_cache, tmp_path, canary) -> Scene:
    return Scene(small_cache, tmp_path, canary)


def _assert_read_only_commands(s: Scene, line: str, *, shown: str) -> None:
    """ls, gc --dry-run and select answer with ``line`` (select: by not serving the entry),
    verify fails with it, show and explain refuse with ``shown``; nothing is written."""
    r = s.run("ls")
    assert (r.exit_code, r.stderr.splitlines()) == (0, [line]), r.output
    r = s.run("gc")
    assert (r.exit_code, r.stderr.splitlines()) == (0, [line]), r.output
    r = s.run("verify")
    assert r.exit_code == 1, r.output
    orphan = (f"FAIL [integrity] {s.e.blob}: orphan blob: no entry names it (`wgradcache gc "
              "--orphans` removes it once it is 10 minutes old; until then a writer may "
              "still need it)")  # the entry that names it is not whole
    assert r.stderr.splitlines() == [f"FAIL [integrity] ?: {line}", orphan, VERIFY_FAILED]
    r = s.run("select")  # still serves the rest, and says what it skipped
    assert (r.exit_code, r.stderr.splitlines()) == (0, [select_skipped(line)]), r.output
    assert s.e.label not in s.served(r) and s.served(r)
    assert s.skipped(r) == (1, [line])
    for command in ("show", "explain"):
        r = s.run(command)
        assert (r.exit_code, r.stdout, r.stderr.splitlines()) == (2, "", [shown]), r.output
    assert s.unchanged()


def _doc(s: Scene, **edit) -> bytes:
    return json.dumps({**json.loads(s.path.read_bytes()), **edit}).encode()


@pytest.mark.parametrize(("plant", "reason"), [
    (lambda s: b"\xff\xfe" + s.path.read_bytes()[2:], "not UTF-8 (byte 0)"),
    (lambda s: b"[" * 200_000 + b"]" * 200_000, "JSON nested too deep"),
    (lambda s: _doc(s, identity="gfx1250-fp16"), "identity: str, not an object"),
    (lambda s: _doc(s, blob=None), "blob: NoneType, not a string"),
    (lambda s: _doc(s, isa="mma=8"), "isa: str, not an object"),
    (lambda s: _doc(s, blob="../../../canary/secret.txt"),
     "blob: '../../../canary/secret.txt' is not a key (64 hex digits)"),
], ids=["not-utf8", "deep", "identity-str", "blob-null", "isa-str", "blob-path"])
def test_an_entry_that_is_not_whole_is_one_line_everywhere_and_build_mends_it(
        scene, plant, reason):
    scene.path.write_bytes(plant(scene))
    scene.seal()
    line = f"{scene.path}: corrupt: {reason}"
    _assert_read_only_commands(scene, line, shown=f"error: {line}")
    r = scene.run("build")  # the entry is compiled again (relinked: its blob is whole)
    assert (r.exit_code, r.stderr) == (0, ""), r.output
    assert scene.summary(r)["relinked"] == 1 and scene.summary(r)["up_to_date"] == 17
    assert scene.c.read_entry(scene.e.identity_key).blob == scene.e.blob
    assert scene.canary.unchanged()


def _other_entry(s: Scene) -> dict:
    """Another kernel's whole entry, its key rewritten to this file's name."""
    other = next(e for _, e in s.c.iter_entries()
                 if e.dtype == "bf16" and e.variant == "sync.default.none")
    doc = json.loads(s.c.entry_path(other.identity_key).read_bytes())
    return {**doc, "identity_key": s.e.identity_key}


@pytest.mark.parametrize(("plant", "why"), [
    (lambda s: {"identity": {**s.e.identity, "tile_m": 64}}, "hashes"),
    (lambda s: {"identity": {**s.e.identity, "vec_a": 4, "vec_b": 4},
                "label": s.e.label.replace("v8x8", "v4x4")}, "hashes"),
    (_other_entry, "hashes"),
    (lambda s: {"identity": {**s.e.identity, "schema": 2}},
     "identity: schema 2 is not one this version reads (1)"),
    (lambda s: {"identity": {**s.e.identity, "schema": -1}},
     "identity: schema -1 is not one this version reads (1)"),
], ids=["other-tile", "other-widths-relabelled", "other-entry", "schema-2", "schema-neg"])
def test_an_entry_that_is_not_what_its_name_says_is_corrupt_everywhere_and_build_mends_it(
        scene, plant, why):
    """Its identity hashes to another key (an edited spec, another kernel's entry copied
    onto this name) or is of a schema this version does not read: select must not serve
    it, gc must drop it, show must refuse it, and a build compiles it again."""
    doc = {**json.loads(scene.path.read_bytes()), **plant(scene)}
    scene.path.write_text(json.dumps(doc))
    scene.seal()
    if why == "hashes":
        got = KernelSpec.from_dict(doc["identity"]).identity_key()
        why = (f"identity: hashes to {got[:16]}, not to the entry's key "
               f"{scene.e.identity_key[:16]}")
    line = f"{scene.path}: corrupt: {why}"
    _assert_read_only_commands(scene, line, shown=f"error: {line}")
    r = scene.run("build")
    assert (r.exit_code, r.stderr) == (0, ""), r.output
    assert scene.summary(r)["relinked"] == 1 and scene.summary(r)["up_to_date"] == 17
    assert dataclasses.replace(scene.c.read_entry(scene.e.identity_key), published=0) == \
        dataclasses.replace(scene.e, published=0)
    assert scene.canary.unchanged()


def _secret_entry(s: Scene) -> None:
    """A symlink to a file outside that holds a whole entry: following it would work."""
    secret = s.canary.dir / "entry.json"
    secret.write_bytes(s.path.read_bytes())
    s.path.unlink()
    s.path.symlink_to(secret)


@pytest.mark.parametrize(("plant", "kind"), [
    (lambda s: (s.path.unlink(), s.path.mkdir()), "a directory"),
    (lambda s: (s.path.unlink(), os.mkfifo(s.path)), "a FIFO"),
    (lambda s: (s.path.unlink(), s.path.symlink_to("/dev/zero")), "a symbolic link"),
    (_secret_entry, "a symbolic link"),
], ids=["directory", "fifo", "dev-zero", "secret"])
def test_an_entry_that_is_not_a_file_is_never_followed_nor_read(scene, plant, kind):
    plant(scene)
    scene.seal()
    line = f"{scene.path}: corrupt: {kind}, not a regular file (not followed)"
    _assert_read_only_commands(scene, line, shown=f"error: {line}")


def _swap_blob(s: Scene, how: str) -> None:
    b = s.blob
    if how == "secret":
        b.unlink()
        b.symlink_to(s.canary.dir / "secret.txt")
    elif how == "dev-zero":
        b.unlink()
        b.symlink_to("/dev/zero")
    elif how == "fifo":
        b.unlink()
        os.mkfifo(b)
    elif how == "sparse-8g":
        os.truncate(b, 8 << 30)
    elif how == "truncated":
        b.write_bytes(s.blob_bytes[:-1])
    elif how == "emptied":
        b.write_bytes(b"")
    elif how == "flipped":
        data = bytearray(s.blob_bytes)
        data[len(data) // 2] ^= 0x40
        b.write_bytes(bytes(data))


def _blob_reason(s: Scene, how: str) -> str:
    name, size = f"blob {s.e.blob[:16]}", len(s.blob_bytes)
    return {  # gc's line: the entry's path, then this
        "secret": f"{s.blob}: corrupt: a symbolic link, not a regular file",
        "dev-zero": f"{s.blob}: corrupt: a symbolic link, not a regular file",
        "fifo": f"{s.blob}: corrupt: a FIFO, not a regular file",
        "sparse-8g": f"{name} is {8 << 30} bytes, its entry records {size}",
        "truncated": f"{name} is {size - 1} bytes, its entry records {size}",
        "emptied": f"{name} is 0 bytes, its entry records {size}",
        "flipped": f"{name} does not hash to the sha256 its entry records",
    }[how]


BLOBS = ["secret", "dev-zero", "fifo", "sparse-8g", "truncated", "emptied", "flipped"]


@pytest.mark.parametrize("how", BLOBS)
def test_a_blob_that_is_not_its_bytes_is_never_trusted(scene, how):
    """gc reports (and would drop) the entry, select does not serve it, verify fails it
    without reading 8 GB or blocking; the build compiles it again over the bad blob."""
    _swap_blob(scene, how)
    scene.seal()
    r = scene.run("gc")
    assert r.exit_code == 0, r.output
    why = _blob_reason(scene, how)
    assert r.stderr.splitlines() == [f"{scene.path}: {'corrupt: ' * why.startswith('blob')}"
                                     f"{why}"]
    r = scene.run("select")
    gc_line = f"{scene.path}: {'corrupt: ' * why.startswith('blob')}{why}"
    assert (r.exit_code, r.stderr.splitlines()) == (0, [select_skipped(gc_line)]), r.output
    assert scene.e.label not in scene.served(r) and scene.skipped(r) == (1, [gc_line])
    r = scene.run("verify")
    assert r.exit_code == 1 and r.stderr.splitlines()[-1] == VERIFY_FAILED, r.output
    assert len(r.stderr.splitlines()) == 2 and scene.e.label in r.stderr
    assert scene.unchanged()
    r = scene.run("build")
    assert (r.exit_code, r.stderr) == (0, ""), r.output
    assert (scene.summary(r)["built"], scene.summary(r)["up_to_date"]) == (1, 17)
    assert scene.blob.read_bytes() == scene.blob_bytes
    assert scene.canary.unchanged()


@pytest.mark.parametrize("how", ["truncated", "flipped"])
def test_gc_drops_the_entry_of_a_blob_that_is_not_its_bytes(scene, how):
    _swap_blob(scene, how)
    scene.seal()
    r = scene.cli("gc", "--orphans", "--json")
    assert r.exit_code == 0, r.output
    assert r.stderr.splitlines() == [f"{scene.path}: corrupt: {_blob_reason(scene, how)}"]
    assert json.loads(r.stdout)[0]["corrupt_entries"] == 1
    assert not scene.path.exists() and scene.canary.unchanged()
    # the rest is still there: only the entry is gone (its fresh blob waits out gc's grace)
    assert {k for k in scene.before if k != f"{T}/entries/{scene.path.name}"} <= \
        set(tree(scene.root))


@pytest.mark.parametrize("folder", ["entries", "blobs", "used"])
def test_gc_refuses_a_symlinked_folder_and_deletes_nothing(scene, folder):
    """The folder's real contents move to the canary and the cache's folder points there:
    a gc that followed it would delete the canary's files (everything is past --max-size 0
    and, with no entries read, every blob is an orphan)."""
    d = scene.tdir / folder
    shutil.move(d, scene.canary.dir / folder)
    d.symlink_to(scene.canary.dir / folder, target_is_directory=True)
    scene.seal()
    line = (f"error: {d}: a symbolic link, not a directory: not followed out of the cache "
            "(remove it)")
    for args in (["gc", "--max-size", "0"], ["gc", "--orphans", "--stale", "--geometries",
                                             scene.geo]):
        r = scene.cli(*args)
        assert (r.exit_code, r.stdout, r.stderr.splitlines()) == (2, "", [line]), r.output
    assert scene.unchanged()


def test_a_symlinked_entries_folder_is_refused_by_readers_too(scene):
    d = scene.tdir / "entries"
    shutil.move(d, scene.canary.dir / "entries")
    d.symlink_to(scene.canary.dir / "entries", target_is_directory=True)
    scene.seal()
    line = (f"error: {d}: a symbolic link, not a directory: not followed out of the cache "
            "(remove it)")
    for command in ("ls", "verify", "select", "show", "build"):
        r = scene.run(command)
        assert (r.exit_code, r.stderr.splitlines()) == (2, [line]), (command, r.output)
    assert scene.unchanged()


def test_a_folder_the_catalog_does_not_know_is_reported_not_read(scene):
    shutil.copytree(scene.tdir, scene.root / "evil", symlinks=True)
    (scene.root / "evil" / "entries" / "x.json").symlink_to(scene.canary.dir / "secret.txt")
    scene.seal()
    line = f"{scene.root / 'evil'}: not a target of the catalog: skipped"
    r = scene.run("ls")
    assert (r.exit_code, r.stderr.splitlines()) == (0, [line]), r.output
    assert "18 entries" in r.stdout
    r = scene.run("gc")
    assert (r.exit_code, r.stderr.splitlines()) == (0, [line]), r.output
    assert "evil" not in r.stdout
    r = scene.run("verify")
    assert (r.exit_code, r.stderr.splitlines()) == (0, [line]), r.output
    assert scene.unchanged()


def test_a_lock_that_is_a_directory_is_refused_and_an_up_to_date_build_needs_none(scene):
    lock = scene.tdir / ".lock"
    lock.unlink()
    lock.mkdir()
    scene.seal()
    r = scene.run("build")  # nothing to write: no lock taken
    assert (r.exit_code, r.stderr) == (0, ""), r.output
    assert scene.summary(r)["up_to_date"] == 18
    r = scene.cli("gc", "--orphans")
    refusal = (f"{lock}: a directory, not a regular file: not a lock this tool will open "
               "(remove it)")
    assert (r.exit_code, r.stderr.splitlines()) == (2, [f"error: {refusal}"]), r.output
    assert scene.canary.unchanged() and tree(scene.root) == {
        **scene.before, **{k: v for k, v in tree(scene.root).items() if "stats" in k}}


@pytest.mark.parametrize("command", ["ls", "verify", "gc", "show", "build"])
def test_a_cache_dir_that_is_not_a_directory_is_one_line(scene, command):
    scene.seal()
    r = scene.cli(*scene.args(command), cache_dir="/dev/null")
    assert r.exit_code == 2, r.output
    assert r.stderr.splitlines() == ["error: /dev/null: not a directory: not a cache"]
    assert scene.unchanged()


def _read_only(monkeypatch, root: Path) -> list[str]:
    """Every write below ``root`` fails with EROFS, as on a read-only mount (the tests run
    as root, where chmod stops nothing): opens for writing, mkdir, rename, unlink. Returns
    the paths that were tried."""
    tried: list[str] = []
    under = str(root.resolve())

    def guard(name, fn, write_flags=None):
        def wrapped(path, *a, **kw):
            p = os.path.abspath(os.fspath(path)) if isinstance(path, (str, os.PathLike)) \
                else ""
            at = kw.get("dir_fd", kw.get("src_dir_fd"))
            if p and at is not None:  # relative to a folder held open: where that is
                p = os.path.join(os.readlink(f"/proc/self/fd/{at}"), os.fspath(path))
            writes = write_flags is None or (a and a[0] & write_flags)
            if p.startswith(under) and writes:
                tried.append(p)
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), p)
            return fn(path, *a, **kw)
        monkeypatch.setattr(os, name, wrapped)

    guard("open", os.open, os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    for name in ("mkdir", "replace", "rename", "unlink", "rmdir"):
        guard(name, getattr(os, name))
    return tried


def test_a_read_only_cache_serves_every_read_only_command(scene, monkeypatch):
    (scene.tdir / ".lock").unlink()
    scene.seal()
    tried = _read_only(monkeypatch, scene.root)
    for command in ("ls", "show", "explain", "verify", "select", "gc"):
        r = scene.run(command)
        assert (r.exit_code, r.stderr) == (0, ""), (command, r.output)
    r = scene.cli(*scene.args("build")[:-1])
    assert (r.exit_code, r.stderr) == (0, ""), r.output
    assert r.stdout.splitlines()[-1] == f"{T}: nothing to compile: all 18 jobs up to date"
    # the lock was never asked for; the stats line was tried, and skipped
    assert tried == [str(scene.tdir / "stats.jsonl")]
    assert scene.unchanged()


def _stopped(path, strerror: str, errno_: int, jobs: int, stage2: int = 0) -> str:
    s2 = f" and {stage2} stage-2 kernel(s)" if stage2 else ""
    return (f"failed: {T}: the cache cannot be written (OSError: [Errno {errno_}] {strerror}: "
            f"'{path}'): {jobs} job(s){s2} not published, nothing half-written; the next "
            "build compiles them")


def test_a_build_with_work_on_a_read_only_cache_fails_naming_the_lock(scene, monkeypatch):
    """The job to publish stops the build on the writer lock: one line naming it, exit 1,
    and no failure record is tried either."""
    scene.path.unlink()
    lock = scene.tdir / ".lock"
    lock.unlink()
    scene.seal()
    tried = _read_only(monkeypatch, scene.root)
    r = scene.run("build")
    assert r.exit_code == 1, r.output
    assert r.stderr.splitlines() == [_stopped(lock, "Read-only file system", 30, 1)]
    assert scene.summary(r)["failed"] == 1 and scene.summary(r)["stopped_jobs"] == 1
    assert str(lock) in tried and not [t for t in tried if "/failed" in t]
    assert scene.unchanged()


def test_a_read_only_cache_with_every_job_to_build_is_one_line(scene, monkeypatch):
    """18 jobs and both stage-2 kernels to publish: one line for the run, every one
    counted, nothing written, nothing compiled past the first refusal but what was already
    running."""
    for d in ("entries", "stage2"):
        for f in (scene.tdir / d).iterdir():
            f.unlink()
    lock = scene.tdir / ".lock"
    lock.unlink()
    scene.seal()
    _read_only(monkeypatch, scene.root)
    r = scene.run("build")
    assert r.exit_code == 1, r.output
    assert r.stderr.splitlines() == [_stopped(lock, "Read-only file system", 30, 18, 2)]
    doc = scene.summary(r)
    assert (doc["jobs"], doc["failed"], doc["stopped_jobs"], doc["stage2_failed"],
            doc["built"], doc["relinked"]) == (18, 18, 18, 2, 0, 0)
    assert scene.unchanged()


def test_a_full_disk_stops_the_build_and_leaves_no_blob_without_its_sidecar(scene,
                                                                         monkeypatch):
    """ENOSPC while the first sidecar is written: the blob written just before is removed
    again, the build stops there in one line naming the path, the jobs after it are not
    published (nor recorded as failed), the rest of the cache is intact."""
    sidecar_dir = scene.c.blobs
    gone = [e for _, e in scene.c.iter_entries() if e.dtype == "fp16"
            and e.identity["reduction"] != "two_stage"]
    for e in gone:
        scene.c.remove_entry(e.identity_key)
        scene.c.remove_blob(e.blob)
    scene.seal()
    fsync = os.fsync
    failed_at: list[str] = []

    def full(fd):
        name = os.readlink(f"/proc/self/fd/{fd}")
        if name.startswith(str(sidecar_dir / ".")) and ".json." in name:
            failed_at.append(name)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return fsync(fd)

    monkeypatch.setattr(os, "fsync", full)
    r = scene.run("build")
    assert r.exit_code == 1, r.output
    [line] = r.stderr.splitlines()
    assert len(failed_at) == 1  # one write tried and refused; none after it
    sidecar = sidecar_dir / Path(failed_at[0]).name.split(".")[1]
    assert line == _stopped(f"{sidecar}.json", "No space left on device", 28, len(gone))
    assert scene.summary(r)["stopped_jobs"] == len(gone)
    after = tree(scene.root)
    assert {k: v for k, v in after.items() if "stats" not in k} == {
        k: v for k, v in scene.before.items() if "stats" not in k}
    assert scene.canary.unchanged()


@pytest.mark.parametrize(("size", "line"), [
    ("inf", "size 'inf' is not a number with an optional unit (K, M, G, T)"),
    ("nan", "size 'nan' is not a number with an optional unit (K, M, G, T)"),
    ("-1", "size '-1' is not a number with an optional unit (K, M, G, T)"),
    ("1e999", "size '1e999' is not a number with an optional unit (K, M, G, T)"),
    ("\uff11G", "size '\uff11G' is not a number with an optional unit (K, M, G, T)"),
    ("5X", "size '5X': unknown unit 'x' (use K, M, G or T)"),
    ("99999999999T", "size '99999999999T' is larger than 1 EiB"),
])
def test_gc_max_size_that_is_not_a_size_is_one_line(scene, size, line):
    scene.seal()
    r = scene.cli("gc", "--max-size", size)
    assert (r.exit_code, r.stdout, r.stderr.splitlines()) == (2, "", [
        f"error: --max-size: {line}"])
    assert scene.unchanged()


def test_a_codegen_option_change_is_not_up_to_date(scene):
    """explain says CHANGED; the build agrees (it relinks the entry to today's options)."""
    doc = json.loads(scene.path.read_bytes())
    doc["codegen_options"] = {**doc["codegen_options"], "opt_level": 1}
    scene.path.write_text(json.dumps(doc))
    r = scene.cli("explain", scene.e.label, "--json")
    row = next(x for x in json.loads(r.stdout)["inputs"] if x["input"] == "codegen options")
    assert row["same"] is False
    r = scene.run("build")
    assert (r.exit_code, scene.summary(r)["relinked"], scene.summary(r)["up_to_date"]) == \
        (0, 1, 17), r.output
    assert scene.c.read_entry(scene.e.identity_key).codegen_options == \
        scene.e.codegen_options


def test_published_files_follow_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        c = TargetCache(tmp_path, T)
        c.write_blob("ab" * 32, b"\x7fELF")
        assert (c.blob_path("ab" * 32).stat().st_mode & 0o777) == 0o640
    finally:
        os.umask(old)
