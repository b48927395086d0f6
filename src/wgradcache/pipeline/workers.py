"""The build's workers: pure tasks (job -> bytes) and the runs that survive LLVM's exits.

A task never reads or writes the cache: the coordinator hands it the content keys it may
relink to (``TargetCache.relinkable``, listed once per build on the coordinator's disk), so
a Dask worker's own ``./cache`` never decides anything. The set travels with every task
(~210 kB pickled for a full cache, 0.2 ms): cheap beside a compile, and only paid by jobs
that are not up to date. A task returns a result dict:

    {"ik", "t": {phase: seconds}, "symbol", "ir_sha256", "ckey"}  and then one of
    "hsaco" + "meta" (a ``BlobMeta``)   compiled here
    "relink": True                      a blob with this content key exists: no compile
    "error" + "transient"               the reason; transient failures are retried by the
                                        next build, permanent ones only on --retry-failed

LLVM can kill a worker (``Cannot select`` aborts, an LDS overflow exits): the chunk's
unfinished jobs are retried one at a time in an isolated child with the job timeout.

The coordinator can die too (SIGKILL): every loky worker starts with
``lifetime.end_with_parent`` as its initializer (``parallel_config``'s backend arguments
reach loky's executor), so the kernel ends it with the coordinator and loky's resource
trackers follow; a Dask worker belongs to its cluster and is left alone.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace

from wgradcache.cache.entry import BlobMeta
from wgradcache.cache.store import blank_symbol, content_key, sha256_bytes
from wgradcache.compile.lifetime import end_with_parent
from wgradcache.model.spec import KernelSpec
from wgradcache.pipeline.plan import DEFAULT_JOB_TIMEOUT

__all__ = ["RunOptions", "codegen_context", "job_task", "job_alone", "metadata",
           "run_chunked", "run_one_worker", "reproduce_task", "reproduce_alone"]


@dataclass(frozen=True)
class RunOptions:
    """How ``run_chunked`` runs a list of tasks: the build's and verify's one set of knobs
    (a caller that is not a build states these, rather than a ``BuildRequest``)."""

    n_jobs: int  # worker processes (at most one per task)
    job_timeout: float = DEFAULT_JOB_TIMEOUT  # seconds per task, then it is retried alone
    backend: str = "loky"  # or "dask": the client the caller connected

# compile/isolate.py's words for a compile it killed at the job timeout: the machine was
# busy or the job is slow, not wrong, so the next build tries again
_TIMED_OUT = "codegen timed out"


def codegen_context(target: str | None = None) -> tuple[dict, dict, str]:
    """(codegen options, toolchain identity, toolchain digest) of this process for
    ``target`` (None: the AMD targets'; ``sm_90`` has ptxas in its identity)."""
    from wgradcache.compile.codegen import CodegenOptions
    from wgradcache.compile.toolchain import toolchain_identity

    tc = toolchain_identity(target)
    return CodegenOptions().to_dict(), tc.to_dict(), tc.digest()


def _emit(spec: KernelSpec, options: dict, toolchain: dict, check: bool) -> tuple[dict, str]:
    """(result, IR text), or (result with a permanent error, "") for a generator bug."""
    from wgradcache.wgrad.emit import emit_ir

    t0 = time.perf_counter()
    try:
        k = emit_ir(spec, check=check)
    except Exception as e:  # a generator bug is this job's failure, not the build's
        return ({"ik": spec.identity_key(), "error": f"emit: {type(e).__name__}: {e}",
                 "transient": False}, "")
    return ({"ik": spec.identity_key(), "t": {"emit": time.perf_counter() - t0},
             "symbol": k.symbol,
             "ir_sha256": sha256_bytes(blank_symbol(k.ir_text, k.symbol).encode()),
             "ckey": content_key(k.ir_text, k.symbol, spec.target, options, toolchain)},
            k.ir_text)


def metadata(obj) -> BlobMeta:
    """The sidecar of a compiled object (code-object metadata, ISA statistics, listing)."""
    from wgradcache.compile.isa import isa_stats

    return BlobMeta(code_object=obj.info.to_dict(), isa=isa_stats(obj.asm),
                    listing=obj.listing, blob_size=len(obj.hsaco),
                    blob_sha256=sha256_bytes(obj.hsaco))


def _toolchain_mismatch(toolchain: dict, target: str | None = None) -> str:
    """Why this worker must not compile for a coordinator with ``toolchain`` (a dask worker
    on another machine, say, with another LLVM or LLD: its bytes would be filed under the
    coordinator's content key), or "" when the two agree."""
    from wgradcache.compile.toolchain import identity_digest, keyed_fields, toolchain_identity

    mine = toolchain_identity(target)
    if mine.digest() == identity_digest(toolchain):
        return ""
    diff = [k for k, v in keyed_fields(mine.to_dict()).items() if toolchain.get(k) != v]
    return ("this worker's toolchain differs from the coordinator's in "
            + ", ".join(f"{k} ({getattr(mine, k)!r} here, {toolchain.get(k)!r} there)"
                        for k in diff))


def _settle(spec: KernelSpec, options: dict, toolchain: dict, check: bool,
            relinkable: frozenset[str]) -> tuple[dict, str]:
    """Emit and key one job: (result, IR to compile), or (result, "") when nothing is left
    to compile (an emit error, or a content key the coordinator can relink)."""
    res, ir = _emit(spec, options, toolchain, check)
    if "error" in res:
        return res, ""
    if res["ckey"] in relinkable:
        return {**res, "relink": True}, ""
    return res, ir


def job_task(spec: KernelSpec, options: dict, toolchain: dict, check: bool,
             relinkable: frozenset[str]) -> dict:
    """One job in a worker: emit, key, and compile unless the coordinator can relink that
    key. Never raises; an LLVM exit kills only this worker."""
    from wgradcache.compile.codegen import CodegenOptions, compile_ir

    mismatch = _toolchain_mismatch(toolchain, spec.target)
    if mismatch:  # a misconfigured worker, not a property of the job
        return {"ik": spec.identity_key(), "error": mismatch, "transient": True}
    res, ir = _settle(spec, options, toolchain, check, relinkable)
    if not ir:
        return res
    try:
        obj = compile_ir(ir, spec.target, CodegenOptions())
        t0 = time.perf_counter()
        meta = metadata(obj)
        t = {**res["t"], **{k: v for k, v in obj.timings.items() if k != "total"},
             "isa_stats": time.perf_counter() - t0}
        return {**res, "t": t, "hsaco": obj.hsaco, "meta": meta}
    except Exception as e:  # parse/verify errors come back as Python exceptions
        return {**res, "error": f"{type(e).__name__}: {e}", "transient": False}


def job_alone(spec: KernelSpec, options: dict, toolchain: dict, check: bool,
              relinkable: frozenset[str], timeout: float) -> dict:
    """The retry: the compile in its own child process, so LLVM's exit is only its own."""
    from wgradcache.compile.codegen import CodegenOptions
    from wgradcache.compile.isolate import compile_isolated

    # emitting is pure Python: safe in this process
    res, ir = _settle(spec, options, toolchain, check, relinkable)
    if not ir:
        return res
    out = compile_isolated(ir, spec.target, CodegenOptions(), timeout=timeout)
    if not out.ok:
        return {**res, "error": out.error, "transient": out.error.startswith(_TIMED_OUT)}
    try:
        return {**res, "hsaco": out.obj.hsaco, "meta": metadata(out.obj)}
    except Exception as e:
        return {**res, "error": f"{type(e).__name__}: {e}", "transient": False}


def _stored_ir(job: KernelSpec | tuple[str, str, int], symbol: str, options: dict,
               toolchain: dict) -> tuple[str, str, str]:
    """(IR to compile, its content key, target) of a stored kernel: a walk job, or a stage-2
    companion ``(target, dW dtype, R)``, emitted as the build emits it, with the kernel
    named ``symbol``. Identities whose IR differs only in the kernel's name share one blob
    (the content key blanks the name), compiled under the name of the first: so the bytes
    to reproduce are those of the name the stored binary holds."""
    if isinstance(job, KernelSpec):
        from wgradcache.wgrad.emit import emit_ir

        k = emit_ir(job, check=False)
        ir, emitted, target = k.ir_text, k.symbol, job.target
    else:
        from wgradcache.kernel.lower import lower
        from wgradcache.wgrad.stage2 import build_stage2

        target, dw, r = job
        kd = build_stage2(target, dw, r)
        ir, emitted = lower(kd, target), kd.name
    ckey = content_key(ir, emitted, target, options, toolchain)
    return ir.replace(emitted, symbol), ckey, target


def reproduce_task(key: str, job: KernelSpec | tuple[str, str, int], symbol: str,
                   options: dict, toolchain: dict) -> dict:
    """``verify --level reproduce`` in a worker: the build's compile of one stored kernel
    again. Returns ``{"ik": key, "ckey", "hsaco"}`` or ``{"ik": key, "error"}``; never
    raises, and an LLVM exit kills only this worker (``reproduce_alone`` retries it)."""
    from wgradcache.compile.codegen import CodegenOptions, compile_ir

    mismatch = _toolchain_mismatch(toolchain, job.target if isinstance(job, KernelSpec)
                                   else job[0])
    if mismatch:
        return {"ik": key, "error": mismatch}
    try:
        ir, ckey, target = _stored_ir(job, symbol, options, toolchain)
    except Exception as e:  # a generator bug
        return {"ik": key, "error": f"emit: {type(e).__name__}: {e}"}
    try:
        return {"ik": key, "ckey": ckey,
                "hsaco": compile_ir(ir, target, CodegenOptions(), listing="none").hsaco}
    except Exception as e:
        return {"ik": key, "ckey": ckey, "error": f"{type(e).__name__}: {e}"}


def reproduce_alone(key: str, job: KernelSpec | tuple[str, str, int], symbol: str,
                    options: dict, toolchain: dict, timeout: float) -> dict:
    """``reproduce_task``'s retry: the compile in its own child process."""
    from wgradcache.compile.codegen import CodegenOptions
    from wgradcache.compile.isolate import compile_isolated

    try:
        ir, ckey, target = _stored_ir(job, symbol, options, toolchain)
    except Exception as e:
        return {"ik": key, "error": f"emit: {type(e).__name__}: {e}"}
    out = compile_isolated(ir, target, CodegenOptions(), timeout=timeout, listing="none")
    if not out.ok:
        return {"ik": key, "ckey": ckey, "error": out.error}
    return {"ik": key, "ckey": ckey, "hsaco": out.obj.hsaco}


def _not_run(key: str) -> dict:
    """The result of a task ``stop`` kept from running."""
    return {"ik": key, "error": "not compiled: the build stopped", "transient": True,
            "stopped": True}


def run_chunked(fn: Callable, tasks: list[tuple], opts: RunOptions,
                on_result: Callable[[dict], None], key_of: Callable[[tuple], str],
                retry: Callable[[tuple], dict],
                stop: Callable[[], bool] | None = None) -> None:
    """Run tasks in chunks through joblib; on a dead worker or a timeout, retry the chunk's
    unfinished tasks alone. Chunks are large (a barrier each) because deaths are rare.

    Only joblib's own errors mean "retry": ``on_result`` runs outside that guard, so an
    error of the caller is never mistaken for a dead worker (it must not raise).

    ``stop``: asked after each result; once true, the tasks not yet finished are not run
    (the chunk's generator is closed, which cancels its pending tasks) and each comes back
    as a ``"stopped"`` result, so every task still gets exactly one ``on_result``."""
    if not tasks:
        return
    # a worker is a process: none that would get no task
    opts = replace(opts, n_jobs=min(opts.n_jobs, len(tasks)))
    stop = stop or (lambda: False)
    if opts.n_jobs == 1 and opts.backend != "dask":
        run_one_worker(fn, tasks, opts, on_result, retry, stop, key_of)
        return
    import joblib

    chunk = max(opts.n_jobs * 32, 64)
    # The same initializer arguments every chunk, so joblib reuses one executor.
    ctx = (joblib.parallel_config(backend="dask") if opts.backend == "dask"
           else joblib.parallel_config(backend="loky", initializer=end_with_parent,
                                       initargs=(os.getpid(),)))
    with ctx:
        for start in range(0, len(tasks), chunk):
            done: set[str] = set()
            if not stop():
                _run_chunk(joblib, fn, tasks[start:start + chunk], opts, on_result,
                           key_of, retry, stop, done)
            if stop():  # what is left of this chunk and every later one: not run
                for t in tasks[start:]:
                    if key_of(t) not in done:
                        on_result(_not_run(key_of(t)))
                return


def _run_chunk(joblib, fn: Callable, part: list[tuple], opts: RunOptions,
               on_result: Callable[[dict], None], key_of: Callable[[tuple], str],
               retry: Callable[[tuple], dict], stop: Callable[[], bool],
               done: set[str]) -> None:
    """One chunk of ``run_chunked``; ``done`` collects the keys that got their result."""
    par = joblib.Parallel(n_jobs=opts.n_jobs, timeout=opts.job_timeout,
                          return_as="generator_unordered", batch_size=1,
                          pre_dispatch="2*n_jobs")
    results = iter(par(joblib.delayed(fn)(*t) for t in part))
    while True:
        try:
            res = next(results)
        except StopIteration:
            return
        except Exception:  # TerminatedWorkerError, TimeoutError, a dead dask worker
            for t in part:
                if key_of(t) not in done:
                    done.add(key_of(t))
                    on_result(retry(t))
            return
        done.add(res["ik"])
        on_result(res)
        if stop():
            with warnings.catch_warnings():  # the cancel is the point: joblib's
                # "N tasks ... have been cancelled" warning would be a second stderr line
                warnings.filterwarnings("ignore", r".* tasks which were still being "
                                        "processed by the workers have been cancelled",
                                        UserWarning)
                getattr(results, "close", lambda: None)()  # cancels the pending tasks
            return


def run_one_worker(fn: Callable, tasks: list[tuple], opts: RunOptions,
                   on_result: Callable[[dict], None], retry: Callable[[tuple], dict],
                   stop: Callable[[], bool] = lambda: False,
                   key_of: Callable[[tuple], str] = lambda t: t[0].identity_key()) -> None:
    """One worker process, one task at a time. joblib runs ``n_jobs=1`` in this process
    (``SequentialBackend``), where an LLVM exit would end the build and no timeout holds;
    a loky executor keeps the worker a separate process. A dead worker or a timeout
    retries that task alone and replaces the worker.

    The executor is this run's own, not loky's reusable one: joblib reuses that singleton
    for ``Parallel`` and breaks on one it did not create (``_temp_folder_manager``)."""
    from concurrent.futures import TimeoutError as FutureTimeout

    from joblib.externals.loky import ProcessPoolExecutor

    def worker() -> ProcessPoolExecutor:
        return ProcessPoolExecutor(max_workers=1, initializer=end_with_parent,
                                   initargs=(os.getpid(),))

    executor = worker()
    try:
        for t in tasks:
            if stop():
                on_result(_not_run(key_of(t)))
                continue
            try:
                res = executor.submit(fn, *t).result(timeout=opts.job_timeout)
            except Exception as e:  # TerminatedWorkerError, BrokenProcessPool, a timeout
                executor.shutdown(wait=False, kill_workers=isinstance(e, FutureTimeout))
                executor = worker()
                res = retry(t)
            on_result(res)
    finally:
        executor.shutdown(wait=False, kill_workers=True)
