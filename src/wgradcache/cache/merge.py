"""Union shard caches into one (DESIGN §8), trusting nothing in them.

A shard is a CI artifact or a cache copied from another machine: input. So merge checks
every source whole before it writes anything, and a merge with any finding writes nothing
(not a directory, not a lock, not a stats line):

* the source root holds only target folders of the catalog (``evil``, or a symlink at the
  root, is a finding), and no folder in a target folder is a symlink (``check_layout``);
* every entry and stage-2 record passes the one typed reader (keys of 64 hex digits, so a
  ``blob`` field can name no path outside the cache; an entry that is a symlink, a FIFO or
  a device is never opened);
* its blob is a regular file of the recorded size (compared by ``lstat`` first, so an 8 GB
  sparse blob is never read; at most ``MAX_BLOB`` is), hashing to the recorded sha256;
  its sidecar, when there is one, is whole and states the entry's ``code_object`` and
  ``isa`` (a blob without a sidecar is legitimate: a build drops one it cannot read);
* one content key names one blob: two records (in the sources or the destination) that
  give one key different bytes conflict;
* a two-stage entry's stage-2 kernel is in a source or the destination;
* every timings file (``timings/<class>.json``) of a source and of the destination passes
  its reader (``cache/timings.py``).

Timings are unioned per device class: rows of one (kernel, blob, problem, dtype, degree)
in two places keep the newer measurement, and the newer fit is kept. Rows are copied as
they are, whether or not an entry holds their kernel: a row of an older blob is stale and
select ignores it; gc drops it.

The same identity (or stage-2 name) with other content in two places is decided by who
built it. Builds are byte-deterministic, so other bytes from the same generator and
toolchain digests are a conflict (a non-deterministic build, nobody can say which is
right). Other digests mean one of the two was built by an older generator or LLVM: the
record whose digests are this tool's current ones (``Digests``, given by the caller:
``cache/`` imports neither the generator nor the toolchain) supersedes the other, so the
nightly merge goes through after a generator or LLVM change. When neither is current,
nothing says which supersedes: a conflict. The same blob with other digests is no conflict
either; the current record's digests are kept, so the next build finds it up to date.

Writes go through ``TargetCache`` (temp file, fsync, ``os.replace``), under the
destination's writer lock, stage-2 records before the entries that need them, each blob
and sidecar before its record. A source that changes between the check and the copy (its
blob no longer hashes to what was checked) stops the merge with ``CorruptEntry``: the
records written before it are whole, none after it is written. Merging the same source
twice is a no-op.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from wgradcache.cache.catalog import scan_targets
from wgradcache.cache.entry import (
    UNKNOWN_SHA256,
    BlobMeta,
    CorruptEntry,
    Entry,
    Stage2Entry,
    kernel_facts,
    read_record,
)
from wgradcache.cache.store import (
    MAX_RECORD,
    CacheRefused,
    TargetCache,
    read_capped,
    sha256_bytes,
    stage2_of,
)
from wgradcache.cache.timings import TimingsFile, merge_files, over_cap

__all__ = ["Digests", "Finding", "MergeReport", "merge", "decide"]

Record = Entry | Stage2Entry


@dataclass(frozen=True)
class Digests:
    """What this tool builds with now: ``wgrad.emit.generator_digest()`` and the toolchain
    digest of ``pipeline.workers.codegen_context``; ``toolchain`` None when this machine
    has no toolchain (then no record is current, and no supersede is decided).
    ``by_target`` names the targets whose toolchain is another one (sm_90: ptxas, not
    LLD), so their records are judged against their own toolchain's digest."""

    generator: str
    toolchain: str | None
    by_target: tuple[tuple[str, str | None], ...] = ()

    def for_target(self, target: str) -> Digests:
        """The digests a build of ``target`` records here."""
        return Digests(self.generator, dict(self.by_target).get(target, self.toolchain))


@dataclass(frozen=True)
class Finding:
    """Why a merge writes nothing: ``conflict`` (two builds disagree about one kernel) or
    ``refused`` (a source, or the destination, is not a whole cache)."""

    kind: str
    source: str
    reason: str
    target: str = ""
    name: str = ""  # the identity key or the stage-2 name
    label: str = ""

    def line(self) -> str:
        """One line for people (the CLI escapes it: a label comes from the shard)."""
        if self.kind == "conflict":
            return (f"CONFLICT {self.target} {self.label or self.name} from {self.source}: "
                    f"{self.reason}")
        return f"REFUSED {self.reason}"

    def to_json(self) -> dict:
        return {"kind": self.kind, "source": self.source, "target": self.target,
                "identity_key": self.name, "label": self.label, "reason": self.reason}


@dataclass(frozen=True)
class MergeReport:
    copied_entries: int = 0
    copied_stage2: int = 0
    copied_blobs: int = 0
    copied_timing_rows: int = 0  # timing rows the destination lacked (or held older)
    skipped: int = 0  # entries whose content was there already
    superseded: int = 0  # records replaced by, or kept over, one from an older build
    findings: tuple[Finding, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.findings

    @property
    def conflicts(self) -> list[dict]:
        return [f.to_json() for f in self.findings if f.kind == "conflict"]

    def to_json(self) -> dict:
        return {"ok": self.ok, "copied_entries": self.copied_entries,
                "copied_stage2": self.copied_stage2, "copied_blobs": self.copied_blobs,
                "copied_timing_rows": self.copied_timing_rows,
                "skipped": self.skipped, "superseded": self.superseded,
                "findings": [f.to_json() for f in self.findings],
                "lines": [f.line() for f in self.findings]}


def merge(sources: list[str | Path], dest: str | Path,
          current: Digests | None = None) -> MergeReport:
    """Check every source, then copy what the destination lacks or what supersedes it.

    ``current`` decides which of two builds of one identity supersedes (see the module
    docstring); without it, other content for one identity is always a conflict.
    ValueError when a source is not a directory or ``dest`` exists and is not one (bad
    input: the CLI exits 2); a report with findings when a cache's content is refused."""
    paths, dest = [Path(s) for s in sources], Path(dest)
    for src in paths:
        if not src.is_dir():
            raise ValueError(f"merge source {src} is not a cache directory")
    if dest.exists() and not dest.is_dir():
        raise ValueError(f"merge destination {dest} is not a directory")
    planner = _Planner(dest, current)
    for src in paths:
        planner.add_source(src)
    planner.check_companions()
    if planner.findings:
        return MergeReport(skipped=planner.skipped, superseded=planner.superseded,
                           findings=tuple(planner.findings))
    counts = _write(planner, [str(p) for p in paths])
    return MergeReport(**counts, skipped=planner.skipped, superseded=planner.superseded)


# -- deciding -----------------------------------------------------------------------------
def _is_current(rec: Record, current: Digests | None) -> bool:
    return current is not None and (rec.generator_digest, rec.toolchain_digest) == (
        current.generator, current.toolchain)


def decide(new: Record, have: Record, current: Digests | None) -> tuple[str, str]:
    """(action, conflict reason) for ``new`` where ``have`` is: ``skip`` (same content),
    ``take`` (``new`` supersedes ``have``), ``keep`` (``have`` supersedes ``new``) or
    ``conflict``. The rule is the module docstring's."""
    cn, ch = _is_current(new, current), _is_current(have, current)
    if (new.blob, new.blob_size, new.blob_sha256) == (have.blob, have.blob_size,
                                                        have.blob_sha256):
        return ("take" if cn and not ch else "skip"), ""
    shas = f"blob sha256 {new.blob_sha256[:12]} vs {have.blob_sha256[:12]}"
    if new.blob == have.blob:
        return "conflict", (f"same identity, different content: content key "
                            f"{new.blob[:16]} names two blobs ({shas})")
    digests = (new.generator_digest, new.toolchain_digest)
    if digests == (have.generator_digest, have.toolchain_digest):
        return "conflict", (f"same identity, different content: {shas} from the same "
                            f"generator {digests[0][:12]} and toolchain {digests[1][:12]} "
                            "(a non-deterministic build)")
    if cn != ch:
        return ("take" if cn else "keep"), ""
    now = f"{current.generator[:12]}, {str(current.toolchain)[:12]}" if current else "unknown"
    return "conflict", (f"same identity, different content: {shas}, and neither was built "
                        f"by this tool's generator and toolchain ({now})")


# -- checking -----------------------------------------------------------------------------
@dataclass(frozen=True)
class _Pick:
    """A checked record to copy: from where, and the sha256 of its checked sidecar (None:
    the blob has none), so the copy can prove it writes what was checked."""

    source: TargetCache
    record: Record
    sidecar_sha: str | None


def _read_sidecar(cache: TargetCache, rec: Record) -> tuple[BlobMeta | None, str | None]:
    """(the blob's sidecar, the sha256 of its bytes), (None, None) when there is none;
    CorruptEntry when it is there and not whole (a symlink, a FIFO, not JSON...).
    ``TargetCache.read_sidecar`` answers None for both, which a build wants and a merge
    must not: a symlinked sidecar would otherwise be dropped without a word."""
    path = cache.sidecar_path(rec.blob)
    data = read_capped(path, MAX_RECORD)
    if data is None:
        return None, None
    return (read_record(BlobMeta, data, str(path), cache.target, kernel_facts(rec)),
            sha256_bytes(data))


def _check_record(cache: TargetCache, rec: Record) -> tuple[str, str | None]:
    """(why ``rec``'s blob and sidecar are refused, or "", the sidecar's sha256)."""
    ok, why = cache.check_blob(rec.blob, rec.blob_size, rec.blob_sha256)
    if not ok:
        return why, None
    try:
        meta, sha = _read_sidecar(cache, rec)
    except CorruptEntry as e:
        return str(e), None
    if meta is not None:
        for name in ("code_object", "isa"):
            if getattr(meta, name) != getattr(rec, name):
                return f"{cache.sidecar_path(rec.blob)}: its {name} is not the record's", None
        # a sidecar from before the field reads UNKNOWN_SHA256: copied, never relinked
        if meta.blob_sha256 != UNKNOWN_SHA256 and (meta.blob_sha256, meta.blob_size) != (
                rec.blob_sha256, rec.blob_size):
            return (f"{cache.sidecar_path(rec.blob)}: its blob_sha256/blob_size is not the "
                    "record's"), None
    return "", sha


class _Planner:
    """Walks the sources, checking each record against the destination and the records
    planned before it; collects the findings and what to copy."""

    def __init__(self, dest: Path, current: Digests | None):
        self.dest, self.current = dest, current
        self.findings: list[Finding] = []
        self.skipped = self.superseded = 0
        # (target, "entry" | "stage2", name) -> the record the destination will hold
        self.have: dict[tuple[str, str, str], Record | CorruptEntry] = {}
        self.plan: dict[tuple[str, str, str], _Pick] = {}
        self.claims: dict[tuple[str, str], tuple[int, str, str]] = {}  # blob -> size, sha, who
        self.dests: dict[str, TargetCache | None] = {}
        # (target, class slug) -> (the destination's file or None, the union to write)
        self.timings: dict[tuple[str, str], tuple[TimingsFile | None, TimingsFile]] = {}

    def refuse(self, source: str | Path, reason: str, **kw) -> None:
        self.findings.append(Finding("refused", str(source), reason, **kw))

    def dest_cache(self, target: str) -> TargetCache | None:
        """The destination's cache of ``target``, its records loaded once; None when its
        layout is refused (a finding)."""
        if target not in self.dests:
            d = TargetCache(self.dest, target)
            try:
                d.check_layout()
                records = [(("entry", k), e) for k, e in d.iter_entries()]
                records += [(("stage2", k), e) for k, e in d.stage2_entries().items()]
            except CacheRefused as e:
                self.refuse(self.dest, str(e), target=target)
                d, records = None, []
            if d is not None:
                self.add_timings(d, dest=True)
            for (kind, name), rec in records:
                self.have[(target, kind, name)] = rec
                if not isinstance(rec, CorruptEntry):
                    self.claims.setdefault((target, rec.blob), (
                        rec.blob_size, rec.blob_sha256, f"the destination's {name[:16]}"))
            self.dests[target] = d
        return self.dests[target]

    def add_source(self, src: Path) -> None:
        targets, foreign = scan_targets(src)
        for line in foreign:
            self.refuse(src, f"{line.removesuffix(': skipped')}: not merged")
        for target in targets:
            s = TargetCache(src, target)
            try:
                s.check_layout()
            except CacheRefused as e:
                self.refuse(src, str(e), target=target)
                continue
            if self.dest_cache(target) is None:
                continue
            self.add_timings(s, dest=False)
            for name, rec in s.stage2_entries().items():
                self.consider(s, "stage2", name, rec)
            for ik, rec in s.iter_entries():
                self.consider(s, "entry", ik, rec)

    def add_timings(self, c: TargetCache, dest: bool) -> None:
        """Every device class's timings of ``c`` into the union (a file that is not whole
        is a finding: the destination's too, which gc would remove)."""
        try:
            slugs = c.timing_classes()
        except CacheRefused as e:
            self.refuse(c.root, str(e), target=c.target)
            return
        for slug in slugs:
            try:
                tf = c.read_timings(slug)
            except CorruptEntry as e:
                self.refuse(c.root, f"{e} (the destination's; remove it, or run gc)"
                            if dest else str(e), target=c.target, name=slug)
                continue
            if tf is None:
                continue
            key = (c.target, slug)
            have = self.timings.get(key)
            union = tf if have is None else merge_files(have[1], tf)
            if why := over_cap(union):
                self.refuse(c.root, f"{c.timings_path(slug)}: the union would hold {why}",
                            target=c.target, name=slug)
                continue
            self.timings[key] = (have[0] if have else tf if dest else None, union)

    def consider(self, s: TargetCache, kind: str, name: str,
                 rec: Record | CorruptEntry) -> None:
        """Check one source record, then plan it, skip it or record the finding."""
        src, path = str(s.root), s.entry_path(name) if kind == "entry" else s.stage2_path(name)
        if isinstance(rec, CorruptEntry):
            self.refuse(src, str(rec), target=s.target, name=name)
            return
        why, sidecar_sha = _check_record(s, rec)
        if why:
            self.refuse(src, f"{path}: {why}", target=s.target, name=name)
            return
        key = (s.target, kind, name)
        have = self.plan[key].record if key in self.plan else self.have.get(key)
        if isinstance(have, CorruptEntry):
            self.refuse(self.dest, f"{have} (the destination's; remove it, or run gc)",
                        target=s.target, name=name)
            return
        action, reason = ("take", "") if have is None else decide(
            rec, have, self.current and self.current.for_target(s.target))
        label = rec.label if isinstance(rec, Entry) else rec.name
        if action == "conflict":
            self.findings.append(Finding("conflict", src, reason, s.target, name, label))
        elif action == "take" and self.claim(s, rec, path):
            self.superseded += have is not None
            self.plan[key] = _Pick(s, rec, sidecar_sha)
        elif action != "take":
            self.skipped += action == "skip" and kind == "entry"
            self.superseded += action == "keep"

    def claim(self, s: TargetCache, rec: Record, path: Path) -> bool:
        """Whether ``rec``'s blob agrees with every other record of its content key."""
        size, sha, who = self.claims.setdefault((s.target, rec.blob), (
            rec.blob_size, rec.blob_sha256, str(path)))
        if (size, sha) == (rec.blob_size, rec.blob_sha256):
            return True
        self.findings.append(Finding(
            "conflict", str(s.root), f"content key {rec.blob[:16]}: blob sha256 "
            f"{rec.blob_sha256[:12]} here, {sha[:12]} in {who} (a non-deterministic build)",
            s.target, rec.blob, rec.label if isinstance(rec, Entry) else rec.name))
        return False

    def check_companions(self) -> None:
        """Every two-stage entry to copy has its stage-2 kernel where it will be read."""
        for (target, kind, name), pick in self.plan.items():
            need = stage2_of(pick.record.identity) if kind == "entry" else None
            if need and (target, "stage2", need) not in self.plan and not isinstance(
                    self.have.get((target, "stage2", need)), Stage2Entry):
                self.refuse(pick.source.root, f"{pick.source.entry_path(name)}: a two-stage "
                            f"entry whose stage-2 kernel {need} neither a source nor the "
                            "destination holds", target=target, name=name)


# -- writing ------------------------------------------------------------------------------
def _copy_blob(d: TargetCache, pick: _Pick) -> bool:
    """The blob and sidecar of ``pick`` into ``d`` unless both are there; True when the
    blob was written. The bytes must still be those that were checked."""
    rec, s = pick.record, pick.source
    there = d.check_blob(rec.blob, rec.blob_size, rec.blob_sha256)[0]
    if there and (pick.sidecar_sha is None or d.read_sidecar(rec.blob) is not None):
        return False
    data = s.read_blob(rec.blob)
    meta, sha = _read_sidecar(s, rec)
    if (len(data), sha256_bytes(data), sha) != (rec.blob_size, rec.blob_sha256,
                                                 pick.sidecar_sha):
        raise CorruptEntry(f"{s.blob_path(rec.blob)}: corrupt: changed since merge checked "
                           "it; merge stopped")
    d.write_blob(rec.blob, data, meta)
    if not there:
        d.stamp_used(rec.blob, s.last_used(rec.blob) or None)
    return not there


def _write(planner: _Planner, sources: list[str]) -> dict[str, int]:
    """Copy the plan, one target at a time under its writer lock."""
    counts = {"copied_entries": 0, "copied_stage2": 0, "copied_blobs": 0,
              "copied_timing_rows": 0}
    changed = {k: u for k, (have, u) in planner.timings.items() if u != have}
    for target in sorted({k[0] for k in planner.plan} | {t for t, _ in changed}):
        d = planner.dests[target]
        assert d is not None
        # stage-2 records first: an entry on disk means its stage-2 kernel is there
        picks = sorted(((kind, pick) for (t, kind, _), pick in planner.plan.items()
                        if t == target), key=lambda kp: kp[0] != "stage2")
        entries = 0
        with d.lock():
            for kind, pick in picks:
                counts["copied_blobs"] += _copy_blob(d, pick)
                if kind == "stage2":
                    d.write_stage2(pick.record)
                    counts["copied_stage2"] += 1
                else:
                    d.write_entry(pick.record)
                    entries += 1
            for (t, slug), union in sorted(changed.items()):
                if t == target:
                    have = planner.timings[(t, slug)][0]
                    counts["copied_timing_rows"] += len(set(union.rows) - set(
                        have.rows if have else ()))
                    d.write_timings(union)
        counts["copied_entries"] += entries
        d.append_stats({"merge": sources, "when": time.time(), "entries": entries})
    return counts
