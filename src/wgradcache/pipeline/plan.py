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

from dataclasses import dataclass, field

from wgradcache.cache.entry import CorruptEntry, Entry
from wgradcache.cache.store import TargetCache
from wgradcache.jobs import default_jobdata, resolve_selection, walk
from wgradcache.model.spec import KernelSpec, validate

__all__ = ["BuildRequest", "BuildPlan", "parse_shard", "job_cost", "select_jobs", "make_plan"]


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
    job_timeout: float = 300.0
    retry_failed: bool = False
    backend: str = "loky"
    scheduler: str | None = None
    geometries_file: str | None = None
    cache_dir: str = "cache"


def parse_shard(text: str) -> tuple[int, int]:
    """'i/n' with 0 <= i < n; ValueError with the reason otherwise."""
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"shard {text!r} is not i/n (e.g. 0/3)") from None
    if not 0 <= i < n:
        raise ValueError(f"shard {text!r}: need 0 <= i < n")
    return i, n


def job_cost(spec: KernelSpec) -> float:
    """Expected relative compile cost: unrolled MMAs plus per-element load code. Balances
    shards and orders a build longest first."""
    mma = spec.tile_m * spec.tile_n * spec.tile_k / (16 * 16 * 32)
    va, vb = spec.load_vec_a, spec.load_vec_b
    loads = spec.tile_k * (spec.tile_m / va + spec.tile_n / vb) / spec.block_size
    return 1.0 + mma / (spec.warp_m * spec.warp_n) + loads + (spec.k_loop == "async")


def _shard(specs: list[KernelSpec], i: int, n: int) -> list[KernelSpec]:
    """Deterministic, cost-balanced: longest job first to the least-loaded shard."""
    ordered = sorted(specs, key=lambda s: (-job_cost(s), s.identity_key()))
    loads = [0.0] * n
    mine = []
    for s in ordered:
        j = min(range(n), key=lambda k: (loads[k], k))
        loads[j] += job_cost(s)
        if j == i:
            mine.append(s)
    return sorted(mine, key=lambda s: s.identity_key())


def select_jobs(req: BuildRequest) -> list[KernelSpec]:
    """The walk, filtered by geometry fragments, sharded, then limited (in walk order)."""
    data = default_jobdata(req.geometries_file)
    sel = resolve_selection([req.target], req.dtypes, req.variants, data)
    specs = list(walk(req.target, sel.dtypes, sel.variants, data))
    if req.geometries:
        specs = [s for s in specs if any(f"-{g}-" in f"-{s.label()}-" for g in req.geometries)]
    if req.shard:
        keep = {s.identity_key() for s in _shard(specs, *req.shard)}
        specs = [s for s in specs if s.identity_key() in keep]
    if req.limit is not None:
        specs = specs[: req.limit]
    return specs


@dataclass
class BuildPlan:
    """What the plan settled without compiling, and what is left to compile."""

    pending: list[KernelSpec] = field(default_factory=list)  # longest first
    up_to_date: int = 0
    rejected: dict[str, dict] = field(default_factory=dict)  # identity key -> reject record
    accepted: set[str] = field(default_factory=set)  # identity keys the rules admit
    previous: list[dict] = field(default_factory=list)  # permanent failures, not retried
    # content keys of blobs that are present but not the bytes an entry records: a build
    # must compile them again, never relink to them
    untrusted: set[str] = field(default_factory=set)


    @property
    def settled(self) -> int:
        return self.up_to_date + len(self.rejected) + len(self.previous)


def make_plan(specs: list[KernelSpec], cache: TargetCache, req: BuildRequest, gen: str,
              tdigest: str, validate_specs: bool = True, *, options: dict) -> BuildPlan:
    """Settle what needs no compile; the per-job work here is what a no-op rebuild costs
    (one rule check, one entry read and one blob check per job), so nothing else belongs
    in this loop. ``options`` are the codegen options this build compiles with."""
    data = default_jobdata(req.geometries_file)  # the budgets the walk used
    plan = BuildPlan()
    for spec in specs:
        ik = spec.identity_key()
        ok, why = (validate(spec, limits=data.limits_for(spec.target)) if validate_specs
                   else (True, ""))
        if not ok:
            plan.rejected[ik] = {"identity_key": ik, "label": spec.label(), "reason": why,
                                 "toolchain": tdigest}
            continue
        plan.accepted.add(ik)
        try:
            entry = cache.read_entry(ik)
        except CorruptEntry:
            entry = None
        if entry is not None and _up_to_date(cache, entry, gen, tdigest, options, plan):
            plan.up_to_date += 1
            continue
        fail = cache.read_failure(ik)
        if (fail is not None and not fail.transient and not req.retry_failed
                and fail.generator_digest == gen and fail.toolchain_digest == tdigest):
            plan.previous.append({"label": spec.label(), "reason": fail.reason,
                                  "previous": True})
            continue
        plan.pending.append(spec)
    # Longest first (LPT): the last jobs of a chunk are then short, so the chunk barriers
    # and the end of the build leave a worker idle for little time.
    plan.pending.sort(key=job_cost, reverse=True)
    return plan


def _up_to_date(cache: TargetCache, entry: Entry, gen: str, tdigest: str, options: dict,
                plan: BuildPlan) -> bool:
    """This generator, toolchain and codegen options, and a blob that is its bytes. The
    blob is checked even when the entry is stale: a stale entry's blob is what a relink
    would reuse, so one that fails is marked untrusted."""
    blob_ok = cache.check_blob(entry.blob, entry.blob_size, entry.blob_sha256)[0]
    if not blob_ok and cache.has_blob(entry.blob):
        plan.untrusted.add(entry.blob)
    return (blob_ok and entry.generator_digest == gen and entry.toolchain_digest == tdigest
            and entry.codegen_options == options)
