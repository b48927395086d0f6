"""The build's plan: which jobs, which shard, and what is already settled.

An entry is up to date, without emitting anything, when it is whole (the cache's reader),
was made by this generator digest, toolchain and codegen options, and its blob is proven:
present, a regular file of the recorded size whose sha256 is the recorded one
(``TargetCache.check_blob``). The full hash, not a cheaper proof: it costs 0.1 s for the
2124 blobs (40 MB) of a full gfx1250 cache, inside the no-op rebuild's 2 s, and nothing
short of it catches a flipped byte. An entry that fails is compiled again, and a blob that
failed (present but not its bytes) is never relinked (``BuildPlan.untrusted``): the
compile writes the right bytes over it.

A spec the rules refuse is rejected with the reason; a job that failed permanently with
the same generator and toolchain is skipped (``--retry-failed`` compiles it again), a
transient failure is not. What is left is compiled, longest first.
"""

from __future__ import annotations

import difflib
import heapq
import math
import re
from dataclasses import dataclass, field

from wgradcache.cache.entry import CorruptEntry, Entry, RejectRecord
from wgradcache.cache.store import TargetCache
from wgradcache.jobs import default_jobdata, resolve_selection, walk
from wgradcache.model.spec import KernelSpec, validate

__all__ = ["BuildRequest", "BuildContext", "BuildPlan", "JobFailure", "MAX_SHARDS", "MAX_JOBS",
           "JOB_TIMEOUT_RANGE", "parse_shard", "check_shard", "job_cost", "select_jobs",
           "make_plan"]

MAX_JOBS = 1024  # parallel workers: each one is a process; past this a typo, not a machine
JOB_TIMEOUT_RANGE = (1.0, 86400.0)  # seconds one compile job may take: up to a day (inf or
# 1e10 overflowed the worker's poll timeout)


# Seconds one job's compile may take before it is a (transient) failure: a build's default
# and what the jobs that have no option for it (verify --level reproduce) run under.
DEFAULT_JOB_TIMEOUT = 300.0


@dataclass(frozen=True)
class BuildRequest:
    """``wgradcache build``'s options, from the CLI to the library in one object."""

    target: str
    dtypes: tuple[str, ...] = ()
    variants: tuple[str, ...] = ()
    geometries: tuple[str, ...] = ()  # label fragments, e.g. "t64x64x32-w2x2"
    limit: int | None = None
    shard: tuple[int, int] | None = None  # (i, n)
    jobs: int = 0  # 0: all cores
    job_timeout: float = DEFAULT_JOB_TIMEOUT
    retry_failed: bool = False
    backend: str = "loky"
    scheduler: str | None = None
    geometries_file: str | None = None
    cache_dir: str = "cache"

    def __post_init__(self) -> None:
        # a request made without the CLI too (the CLI's types refuse these first)
        lo, hi = JOB_TIMEOUT_RANGE
        if type(self.jobs) is not int or not 0 <= self.jobs <= MAX_JOBS:
            raise ValueError(f"jobs {self.jobs!r}: expected 0 (all cores) to {MAX_JOBS}")
        if not (isinstance(self.job_timeout, (int, float)) and math.isfinite(self.job_timeout)
                and lo <= self.job_timeout <= hi):
            raise ValueError(f"job_timeout {self.job_timeout!r}: expected finite seconds in "
                             f"[{lo:g}, {hi:g}]")


# Shards are CI matrix jobs: more than this is a typo (and 0/99999999999 was a MemoryError).
MAX_SHARDS = 4096
_SHARD = re.compile(r"([0-9]+)/([0-9]+)")  # ASCII digits: not "1_0", not full-width


def parse_shard(text: str) -> tuple[int, int]:
    """'i/n' with 0 <= i < n <= MAX_SHARDS; ValueError with the reason otherwise."""
    m = _SHARD.fullmatch(text)
    if m is None:
        raise ValueError(f"shard {text[:40]!r} is not i/n with digits (e.g. 0/3)")
    # more digits than a shard count can have: out of bounds, without converting them
    i, n = (int(g) if len(g) <= 6 else MAX_SHARDS + 1 for g in m.groups())
    check_shard(i, n, text)
    return i, n


def check_shard(i: int, n: int, text: str | None = None) -> None:
    """ValueError unless 0 <= i < n <= MAX_SHARDS (a request made without the CLI too)."""
    shown = repr(text[:40]) if text is not None else f"{i}/{n}"
    if not 1 <= n <= MAX_SHARDS:
        raise ValueError(f"shard {shown}: n must be 1 to {MAX_SHARDS}")
    if not 0 <= i < n:
        raise ValueError(f"shard {shown}: need 0 <= i < n")


def job_cost(spec: KernelSpec) -> float:
    """Expected relative compile cost: unrolled MMAs plus per-element load code. Balances
    shards and orders a build longest first."""
    mma = spec.tile_m * spec.tile_n * spec.tile_k / (16 * 16 * 32)
    va, vb = spec.load_vec_a, spec.load_vec_b
    loads = spec.tile_k * (spec.tile_m / va + spec.tile_n / vb) / spec.block_size
    return 1.0 + mma / (spec.warp_m * spec.warp_n) + loads + (spec.k_loop == "async")


def _shard(specs: list[KernelSpec], i: int, n: int) -> list[KernelSpec]:
    """Deterministic, cost-balanced: longest job first to the least-loaded shard (ties to
    the lowest index), through a heap so that n costs log n per job."""
    ordered = sorted(specs, key=lambda s: (-job_cost(s), s.identity_key()))
    loads = [(0.0, k) for k in range(n)]  # a heap of (load, shard); sorted is a heap
    mine = []
    for s in ordered:
        load, j = heapq.heappop(loads)
        heapq.heappush(loads, (load + job_cost(s), j))
        if j == i:
            mine.append(s)
    return sorted(mine, key=lambda s: s.identity_key())


def _check_geometries(req: BuildRequest, specs: list[KernelSpec]) -> None:
    """Every --geometry must match a job of this walk: a typo built 0 jobs and exited 0.
    ValueError naming the close geometries of the walk (or where to find them)."""
    haystack = [f"-{s.label()}-" for s in specs]
    for g in req.geometries:
        if any(f"-{g}-" in h for h in haystack):
            continue
        known = sorted({"t{}x{}x{}-w{}x{}".format(*s.geometry) for s in specs})
        close = difflib.get_close_matches(g[:60], known, n=4, cutoff=0.6)
        hint = (f"close: {', '.join(close)}" if close else
                "geometries are label fragments such as t64x64x32-w2x2 "
                "(`wgradcache count --list` shows the labels)")
        raise ValueError(f"geometry {g[:60]!r} matches no job of {req.target} in this "
                         f"selection; {hint}")


def select_jobs(req: BuildRequest) -> list[KernelSpec]:
    """The walk, filtered by geometry fragments, limited to its first N, then sharded: the
    limit filters the walk before sharding, so the shards of a --limit N build together
    are the --limit N build. Bad geometries, limits and shards raise ValueError before
    anything touches the cache."""
    if req.limit is not None and req.limit < 0:
        raise ValueError(f"limit {req.limit}: must be >= 0")
    if req.shard:
        check_shard(*req.shard)
    data = default_jobdata(req.geometries_file)
    sel = resolve_selection([req.target], req.dtypes, req.variants, data)
    specs = list(walk(req.target, sel.dtypes, sel.variants, data))
    if req.geometries:
        _check_geometries(req, specs)
        specs = [s for s in specs if any(f"-{g}-" in f"-{s.label()}-" for g in req.geometries)]
    if req.limit is not None:
        specs = specs[: req.limit]
    if req.shard:
        keep = {s.identity_key() for s in _shard(specs, *req.shard)}
        specs = [s for s in specs if s.identity_key() in keep]
    return specs


@dataclass(frozen=True)
class BuildContext:
    """What every entry of one build records besides its job: generator and toolchain,
    and what the plan compares an entry's against to call it up to date."""

    generator_digest: str
    options: dict
    toolchain: dict
    toolchain_digest: str


@dataclass(frozen=True)
class JobFailure:
    """A job (or stage-2 kernel) of one build that failed, as the summary, the CLI's lines
    and the refresh report show it. The record on disk is ``FailureRecord``; this is what the
    run says of it, including a reason the record could not keep (a failure record that
    could not be written says so)."""

    label: str  # the job's, or "stage2 <name>"
    reason: str
    transient: bool | None = None  # None: a stage-2 kernel, or a failure of an earlier build
    previous: bool = False  # failed in an earlier build: not compiled again

    def to_json(self) -> dict:
        """The report's object: ``label`` and ``reason``, ``transient`` where it is known,
        ``previous`` only when true (the keys the report always had)."""
        doc: dict = {"label": self.label, "reason": self.reason}
        if self.transient is not None:
            doc["transient"] = self.transient
        if self.previous:
            doc["previous"] = True
        return doc


@dataclass
class BuildPlan:
    """What the plan settled without compiling, and what is left to compile."""

    pending: list[KernelSpec] = field(default_factory=list)  # longest first
    up_to_date: int = 0
    rejected: dict[str, RejectRecord] = field(default_factory=dict)  # by identity key
    accepted: set[str] = field(default_factory=set)  # identity keys the rules admit
    previous: list[JobFailure] = field(default_factory=list)  # permanent, not retried
    # content keys of blobs that are present but not the bytes an entry records: a build
    # must compile them again, never relink to them
    untrusted: set[str] = field(default_factory=set)

    @property
    def settled(self) -> int:
        return self.up_to_date + len(self.rejected) + len(self.previous)


def make_plan(specs: list[KernelSpec], cache: TargetCache, req: BuildRequest,
              ctx: BuildContext, validate_specs: bool = True) -> BuildPlan:
    """Settle what needs no compile; the per-job work here is what a no-op rebuild costs
    (one rule check, one entry read and one blob check per job), so nothing else belongs
    in this loop. ``ctx``: the generator, toolchain and codegen options of this build."""
    gen, tdigest = ctx.generator_digest, ctx.toolchain_digest
    data = default_jobdata(req.geometries_file)  # the budgets the walk used
    plan = BuildPlan()
    for spec in specs:
        ik = spec.identity_key()
        ok, why = (validate(spec, limits=data.limits_for(spec.target)) if validate_specs
                   else (True, ""))
        if not ok:
            plan.rejected[ik] = RejectRecord(identity_key=ik, label=spec.label(),
                                             reason=why, toolchain=tdigest)
            continue
        plan.accepted.add(ik)
        try:
            entry = cache.read_entry(ik)
        except CorruptEntry:
            entry = None
        if entry is not None and _up_to_date(cache, entry, ctx, plan):
            plan.up_to_date += 1
            continue
        fail = cache.read_failure(ik)
        if (fail is not None and not fail.transient and not req.retry_failed
                and fail.generator_digest == gen and fail.toolchain_digest == tdigest):
            plan.previous.append(JobFailure(spec.label(), fail.reason, previous=True))
            continue
        plan.pending.append(spec)
    # Longest first (LPT): the last jobs of a chunk are then short, so the chunk barriers
    # and the end of the build leave a worker idle for little time.
    plan.pending.sort(key=job_cost, reverse=True)
    return plan


def _up_to_date(cache: TargetCache, entry: Entry, ctx: BuildContext, plan: BuildPlan) -> bool:
    """This generator, toolchain and codegen options, and a blob that is its bytes. The
    blob is checked even when the entry is stale: a stale entry's blob is what a relink
    would reuse, so one that fails is marked untrusted."""
    blob_ok = cache.check_blob(entry.blob, entry.blob_size, entry.blob_sha256)[0]
    if not blob_ok and cache.has_blob(entry.blob):
        plan.untrusted.add(entry.blob)
    return (blob_ok and entry.generator_digest == ctx.generator_digest
            and entry.toolchain_digest == ctx.toolchain_digest
            and entry.codegen_options == ctx.options)
