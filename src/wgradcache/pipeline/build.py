"""Build: walk -> plan -> compile -> publish (DESIGN §7, §8).

* Plan: an entry with this generator digest and toolchain is up to date without emitting
  anything. Otherwise the IR is emitted (cheap, in the workers) and keyed; an existing blob
  with that content key is relinked without codegen; only new content keys are compiled.
* Compile: joblib (loky) workers are pure, job -> bytes; only this process publishes.
  LLVM can kill a worker (``Cannot select`` aborts, an LDS overflow exits): the chunk's
  unfinished jobs are retried one at a time in an isolated child with the job timeout, and
  a job that fails again is recorded with LLVM's message while the build goes on.
* Publish: blob, then its metadata sidecar, then the entry (the commit marker), each by
  temp file + ``os.replace`` under the target's writer lock.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from wgradcache.cache.store import (
    BlobRef,
    CorruptEntry,
    TargetCache,
    atomic_write,
    blank_symbol,
    content_key,
    sha256_bytes,
    stage2_name,
)
from wgradcache.jobs import default_jobdata, resolve_selection, walk
from wgradcache.model.spec import KernelSpec, validate

__all__ = ["BuildRequest", "BuildSummary", "select_jobs", "build", "parse_shard",
           "job_cost", "codegen_context"]

SIDE_SUFFIX = ".json"


@dataclass(frozen=True)
class BuildRequest:
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


@dataclass
class BuildSummary:
    target: str
    jobs: int = 0
    built: int = 0
    relinked: int = 0
    up_to_date: int = 0
    rejected: int = 0
    failed: int = 0
    bytes: int = 0
    seconds: float = 0.0
    failures: list[dict] = field(default_factory=list)
    # worker seconds summed over the jobs compiled here, by phase (emit, parse, codegen, link,
    # listing, read, isa_stats): recorded in stats.jsonl, where the time of a build went
    phases: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"target": self.target, "jobs": self.jobs, "built": self.built,
                "relinked": self.relinked, "up_to_date": self.up_to_date,
                "rejected": self.rejected, "failed": self.failed, "bytes": self.bytes,
                "seconds": round(self.seconds, 3)}


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


# ---- worker side (pure: job -> data) ------------------------------------------------

def codegen_context() -> tuple[dict, dict, str]:
    """(codegen options, toolchain identity, toolchain digest) of this process."""
    from wgradcache.compile.codegen import CodegenOptions
    from wgradcache.compile.toolchain import toolchain_identity

    tc = toolchain_identity()
    return CodegenOptions().to_dict(), tc.to_dict(), tc.digest()


def _emit_task(spec: KernelSpec, options: dict, toolchain: dict, check: bool = True) -> dict:
    from wgradcache.wgrad.emit import emit_ir

    t0 = time.perf_counter()
    try:
        k = emit_ir(spec, check=check)
    except Exception as e:  # a generator bug is this job's failure, not the build's
        return {"ik": spec.identity_key(), "error": f"emit: {type(e).__name__}: {e}"}
    return {"ik": spec.identity_key(), "t": {"emit": time.perf_counter() - t0},
            "symbol": k.symbol, "ir": k.ir_text,
            "ir_sha256": sha256_bytes(blank_symbol(k.ir_text, k.symbol).encode()),
            "ckey": content_key(k.ir_text, k.symbol, spec.target, options, toolchain)}


def _metadata(obj) -> dict:
    from wgradcache.compile.isa import isa_stats

    return {"code_object": obj.info.to_dict(), "isa": isa_stats(obj.asm),
            "listing": obj.listing}


def _read_sidecar(cache: TargetCache, ckey: str) -> dict | None:
    """The metadata of an existing blob, or None (no blob, or no whole sidecar)."""
    import json

    side = cache.blobs / f"{ckey}{SIDE_SUFFIX}"
    if not cache.has_blob(ckey):
        return None
    try:
        return json.loads(side.read_text())
    except (OSError, ValueError):
        return None


def _emit_or_settle(spec: KernelSpec, options: dict, toolchain: dict, check: bool,
                    cache_root: str) -> tuple[dict, str | None]:
    """Emit and key one job: (result, IR to compile), or (result, None) when nothing is
    left to compile here (an emit error, or a blob with this content key exists: the
    coordinator relinks)."""
    res = _emit_task(spec, options, toolchain, check)
    if "error" in res:
        return res, None
    ir = res.pop("ir")
    if _read_sidecar(TargetCache(cache_root, spec.target), res["ckey"]) is not None:
        return {**res, "relink": True}, None
    return res, ir


def _toolchain_mismatch(toolchain: dict) -> str:
    """Why this worker must not compile for a coordinator with ``toolchain`` (a dask worker
    on another machine, say, with another LLVM or LLD: its bytes would be filed under the
    coordinator's content key), or "" when the two agree."""
    from wgradcache.compile.toolchain import identity_digest, keyed_fields, toolchain_identity

    mine = toolchain_identity()
    if mine.digest() == identity_digest(toolchain):
        return ""
    diff = [k for k, v in keyed_fields(mine.to_dict()).items() if toolchain.get(k) != v]
    return ("this worker's toolchain differs from the coordinator's in "
            + ", ".join(f"{k} ({getattr(mine, k)!r} here, {toolchain.get(k)!r} there)"
                        for k in diff))


def _job_task(spec: KernelSpec, options: dict, toolchain: dict, check: bool,
              cache_root: str) -> dict:
    """One job in a worker: emit, key, and compile unless a blob with that key exists
    (then the coordinator relinks). Never raises; an LLVM exit kills only this worker."""
    from wgradcache.compile.codegen import CodegenOptions, compile_ir

    mismatch = _toolchain_mismatch(toolchain)
    if mismatch:
        return {"ik": spec.identity_key(), "error": mismatch}
    res, ir = _emit_or_settle(spec, options, toolchain, check, cache_root)
    if ir is None:
        return res
    try:
        obj = compile_ir(ir, spec.target, CodegenOptions())
        t0 = time.perf_counter()
        meta = _metadata(obj)
        t = {**res["t"], **{k: v for k, v in obj.timings.items() if k != "total"},
             "isa_stats": time.perf_counter() - t0}
        return {**res, "t": t, "hsaco": obj.hsaco, "meta": meta}
    except Exception as e:  # parse/verify errors come back as Python exceptions
        return {**res, "error": f"{type(e).__name__}: {e}"}


def _job_alone(spec: KernelSpec, options: dict, toolchain: dict, check: bool,
               cache_root: str, timeout: float) -> dict:
    """The retry: the compile in its own child process, so LLVM's exit is only its own."""
    from wgradcache.compile.codegen import CodegenOptions
    from wgradcache.compile.isolate import compile_isolated

    # emitting is pure Python: safe in this process
    res, ir = _emit_or_settle(spec, options, toolchain, check, cache_root)
    if ir is None:
        return res
    out = compile_isolated(ir, spec.target, CodegenOptions(), timeout=timeout)
    if not out.ok:
        return {**res, "error": out.error}
    try:
        return {**res, "hsaco": out.obj.hsaco, "meta": _metadata(out.obj)}
    except Exception as e:
        return {**res, "error": f"{type(e).__name__}: {e}"}


def _write_blob(cache: TargetCache, ckey: str, hsaco: bytes, meta: dict) -> BlobRef:
    """The blob, then its metadata sidecar (call under the writer lock)."""
    import json

    ref = cache.write_blob(ckey, hsaco)
    atomic_write(cache.blobs / f"{ckey}{SIDE_SUFFIX}", json.dumps(meta, sort_keys=True).encode())
    return ref


# ---- coordinator --------------------------------------------------------------------

def _run_chunked(fn: Callable, tasks: list[tuple], req: BuildRequest, n_jobs: int,
                 on_result: Callable[[dict], None], key_of: Callable[[tuple], str],
                 retry: Callable[[tuple], dict]) -> None:
    """Run tasks in chunks through joblib; on a dead worker or a timeout, retry the chunk's
    unfinished tasks alone. Chunks are large (a barrier each) because deaths are rare."""
    if not tasks:
        return
    if n_jobs == 1 and req.backend != "dask":
        _run_one_worker(fn, tasks, req, on_result, retry)
        return
    import joblib

    chunk = max(n_jobs * 32, 64)
    ctx = (joblib.parallel_config(backend="dask") if req.backend == "dask"
           else joblib.parallel_config(backend="loky"))
    with ctx:
        for start in range(0, len(tasks), chunk):
            part = tasks[start:start + chunk]
            done: set[str] = set()
            try:
                par = joblib.Parallel(n_jobs=n_jobs, timeout=req.job_timeout,
                                      return_as="generator_unordered",
                                      batch_size=1, pre_dispatch="2*n_jobs")
                for res in par(joblib.delayed(fn)(*t) for t in part):
                    done.add(res["ik"])
                    on_result(res)
            except Exception:  # TerminatedWorkerError, TimeoutError, a dead dask worker
                for t in part:
                    if key_of(t) not in done:
                        res = retry(t)
                        done.add(key_of(t))
                        on_result(res)


def _run_one_worker(fn: Callable, tasks: list[tuple], req: BuildRequest,
                    on_result: Callable[[dict], None], retry: Callable[[tuple], dict]) -> None:
    """One worker process, one task at a time. joblib runs ``n_jobs=1`` in this process
    (``SequentialBackend``), where an LLVM exit would end the build and no timeout holds;
    loky's executor keeps the worker a separate process. A dead worker or a timeout
    retries that task alone and replaces the worker."""
    from concurrent.futures import TimeoutError as FutureTimeout

    from joblib.externals.loky import get_reusable_executor

    executor = get_reusable_executor(max_workers=1)
    for t in tasks:
        try:
            res = executor.submit(fn, *t).result(timeout=req.job_timeout)
        except Exception as e:  # TerminatedWorkerError, BrokenProcessPool, a timeout
            if isinstance(e, FutureTimeout):
                executor.shutdown(wait=False, kill_workers=True)
            executor = get_reusable_executor(max_workers=1)
            res = retry(t)
        on_result(res)


def build(req: BuildRequest, progress: Callable[[int, float], None] | None = None,
          on_total: Callable[[int, float], None] | None = None,
          specs: list[KernelSpec] | None = None, validate_specs: bool = True) -> BuildSummary:
    """Bring the cache up to date for the requested jobs; see the module docstring.

    ``on_total(jobs, work)`` is called once the plan is made (work: the ``job_cost`` sum of
    the jobs left to compile); ``progress(jobs, work)`` as jobs settle.

    ``specs`` replaces the walk (library use); ``validate_specs=False`` compiles specs the
    rules refuse (how the tests plant a job that makes LLVM exit).
    """
    from wgradcache.wgrad.emit import generator_digest

    t0 = time.monotonic()
    return _build(req, TargetCache(req.cache_dir, req.target), generator_digest(), t0,
                  progress or (lambda n, work: None), on_total, specs, validate_specs)


def _entry(spec: KernelSpec, ik: str, ref: BlobRef, emitted: dict, meta: dict, gen: str,
           toolchain: dict, tdigest: str, options: dict) -> dict:
    ckey = ref.key
    co = meta["code_object"]
    return {
        "identity_key": ik, "identity": spec.canonical(), "label": spec.label(),
        "target": spec.target, "variant": spec.variant, "dtype": spec.dtype_key,
        "blob": ckey, "blob_size": ref.size, "blob_sha256": ref.sha256,
        "symbol": co.get("symbol", emitted["symbol"]), "emitted_symbol": emitted["symbol"],
        "ir_sha256": emitted["ir_sha256"],
        "block_size": spec.block_size, "code_object": co, "isa": meta["isa"],
        "generator_digest": gen, "toolchain": toolchain, "toolchain_digest": tdigest,
        "codegen_options": options, "published": time.time(),
    }


def _build(req: BuildRequest, cache: TargetCache, gen: str, t0: float,
           progress: Callable[[int, float], None], on_total,
           specs: list[KernelSpec] | None,
           validate_specs: bool) -> BuildSummary:
    options, toolchain, tdigest = codegen_context()
    specs = select_jobs(req) if specs is None else specs
    summary = BuildSummary(target=req.target, jobs=len(specs))
    n_jobs = req.jobs or os.cpu_count() or 1
    planned = 0  # jobs settled by the plan (rejected, up to date, failed before)
    by_ik: dict[str, KernelSpec] = {}
    pending: list[KernelSpec] = []
    for spec in specs:
        ik = spec.identity_key()
        ok, why = validate(spec) if validate_specs else (True, "")
        if not ok:
            summary.rejected += 1
            with cache.lock():
                cache.append_reject({"identity_key": ik, "label": spec.label(), "reason": why,
                                     "toolchain": tdigest})
            planned += 1
            continue
        try:
            entry = cache.read_entry(ik)
        except CorruptEntry:
            entry = None
        if (entry and entry.get("generator_digest") == gen
                and entry.get("toolchain_digest") == tdigest
                and cache.has_blob(entry.get("blob", ""))):
            summary.up_to_date += 1
            planned += 1
            continue
        fail = cache.read_failure(ik)
        if (fail and not req.retry_failed and fail.get("generator_digest") == gen
                and fail.get("toolchain_digest") == tdigest):
            summary.failed += 1
            summary.failures.append({"label": spec.label(), "reason": fail.get("reason", ""),
                                     "previous": True})
            planned += 1
            continue
        by_ik[ik] = spec
        pending.append(spec)
    # The bar and its ETA follow expected compile work (the jobs run longest first).
    if on_total:
        on_total(len(specs), sum(job_cost(s) for s in pending))
    progress(planned, 0.0)

    def record_failure(spec: KernelSpec, reason: str) -> None:
        ik = spec.identity_key()
        summary.failed += 1
        summary.failures.append({"label": spec.label(), "reason": reason})
        with cache.lock():
            cache.write_failure(ik, {"identity_key": ik, "label": spec.label(),
                                     "reason": reason, "generator_digest": gen,
                                     "toolchain_digest": tdigest, "when": time.time()})

    def publish(res: dict, meta: dict, hsaco: bytes | None) -> None:
        """Blob (when new), sidecar, then the entry: one lock hold, so gc never sees the
        blob without its entry. A relink whose blob vanished (a concurrent gc) fails."""
        ik, ckey = res["ik"], res["ckey"]
        with cache.lock():
            if hsaco is not None:
                ref = _write_blob(cache, ckey, hsaco, meta)
                summary.bytes += ref.size
            elif not cache.has_blob(ckey):
                record_failure(by_ik[ik], "blob removed while relinking (concurrent gc); "
                                          "build again")
                progress(1, job_cost(by_ik[ik]))
                return
            else:  # relink: the entry records what is on disk
                ref = cache.blob_ref(ckey)
            cache.write_entry(ik, _entry(by_ik[ik], ik, ref, res, meta, gen, toolchain,
                                         tdigest, options))
            cache.clear_failure(ik)
            cache.stamp_used(ckey)
        if hsaco is None:
            summary.relinked += 1
        else:
            summary.built += 1
        progress(1, job_cost(by_ik[ik]))

    def on_result(res: dict) -> None:
        for phase, sec in res.get("t", {}).items():
            summary.phases[phase] = summary.phases.get(phase, 0.0) + sec
        if "error" in res:
            record_failure(by_ik[res["ik"]], res["error"])
            progress(1, job_cost(by_ik[res["ik"]]))
        elif res.get("relink"):
            meta = _read_sidecar(cache, res["ckey"])
            if meta is None:  # vanished since the worker looked
                record_failure(by_ik[res["ik"]], "blob removed while relinking; build again")
                progress(1, job_cost(by_ik[res["ik"]]))
            else:
                publish(res, meta, None)
        else:
            publish(res, res["meta"], res["hsaco"])

    # Longest first (LPT): the last jobs of a chunk are then short, so the chunk barriers
    # and the end of the build leave a worker idle for little time.
    pending.sort(key=job_cost, reverse=True)
    stage2 = _start_stage2(cache, specs, options, toolchain, tdigest, gen, req.job_timeout)
    root = str(cache.root)
    try:
        _run_chunked(_job_task, [(s, options, toolchain, validate_specs, root) for s in pending],
                     req, n_jobs, on_result, key_of=lambda t: t[0].identity_key(),
                     retry=lambda t: _job_alone(*t, timeout=req.job_timeout))
    except BaseException:
        for *_, job in stage2:
            job.cancel()
        raise
    _finish_stage2(cache, stage2, tdigest, gen, summary)
    summary.seconds = time.monotonic() - t0
    with cache.lock():
        cache.append_stats({**summary.to_json(), "when": time.time(), "generator": gen,
                            "phases": {k: round(v, 3) for k, v in summary.phases.items()},
                            "toolchain": tdigest, "request": _request_doc(req)})
    return summary


def _start_stage2(cache: TargetCache, specs: list[KernelSpec], options: dict,
                  toolchain: dict, tdigest: str, gen: str, timeout: float) -> list[tuple]:
    """The stage-2 reduce kernel of every (dW dtype, R) a two-stage job here needs: those
    up to date are skipped, those with the same IR relinked, the rest started compiling in
    isolated children (collected by ``_finish_stage2`` after the main pass, so their
    start-up and codegen overlap it).

    Keyed by (dW dtype, R) only, so a handful per target; they are companions of the
    two-stage entries (``stage2/<dtype>-wsr<R>.json``), not walk jobs, and do not count
    as jobs. A failure is a failure of every two-stage job that needs it.
    """
    started = []
    needed = sorted({(s.dw_dtype, s.ws_replicas) for s in specs if s.reduction == "two_stage"})
    for dw, r in needed:
        name = stage2_name(dw, r)
        have = cache.stage2_entries().get(name)
        if (isinstance(have, dict) and have.get("generator_digest") == gen
                and have.get("toolchain_digest") == tdigest and cache.has_blob(have["blob"])):
            continue  # up to date without emitting, as the entries are
        from wgradcache.compile.codegen import CodegenOptions
        from wgradcache.compile.isolate import IsolatedCompile
        from wgradcache.kernel.lower_llvm import lower
        from wgradcache.wgrad.stage2 import build_stage2

        kd = build_stage2(cache.target, dw, r)
        ir = lower(kd, cache.target)
        ckey = content_key(ir, kd.name, cache.target, options, toolchain)
        if isinstance(have, dict) and have.get("blob") == ckey and cache.has_blob(ckey):
            with cache.lock():  # same IR: relink to the new generator / toolchain
                cache.write_stage2(name, {**have, "generator_digest": gen,
                                          "toolchain_digest": tdigest})
            continue
        started.append((name, dw, r, kd, ckey,
                        IsolatedCompile(ir, cache.target, CodegenOptions(), timeout=timeout)))
    return started


def _finish_stage2(cache: TargetCache, started: list[tuple], tdigest: str, gen: str,
                   summary: BuildSummary) -> None:
    for name, dw, r, kd, ckey, job in started:
        out = job.outcome()
        if not out.ok:
            summary.failed += 1
            summary.failures.append({"label": f"stage2 {name}", "reason": out.error})
            continue
        meta = _metadata(out.obj)
        with cache.lock():
            ref = _write_blob(cache, ckey, out.obj.hsaco, meta)
            cache.write_stage2(name, {
                "name": name, "dw_dtype": dw, "ws_replicas": r, "symbol": kd.name,
                "blob": ckey, "blob_size": ref.size, "blob_sha256": ref.sha256,
                "block_size": kd.block_size, "code_object": meta["code_object"],
                "isa": meta["isa"], "generator_digest": gen, "toolchain_digest": tdigest})
            cache.stamp_used(ckey)
        summary.bytes += ref.size


def _request_doc(req: BuildRequest) -> dict:
    from dataclasses import asdict

    return {k: v for k, v in asdict(req).items() if v not in (None, (), 0, False)}
