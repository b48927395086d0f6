"""Time a cache build against ``llc-22`` + ``ld.lld-22`` on the same jobs, and show where it goes.

    python benchmarks/build.py [--quick] [--count N] [--workers W] [--repeat R]
                               [--full [--cache-dir DIR]]

One run, one fixed subset of the gfx1250 walk (``codegen.spread_specs``: every variant in
both dtypes, tiles and vec pairs spread; 40 jobs, 10 with ``--quick``). The IR is emitted
first, in this process (timed: ``build_kernel`` and ``lower``, as ``emit.emit_ir`` does);
then, in this order (``--repeat`` cycles the whole order and keeps the median):

  llc+lld      ``llc-22 -O3 -filetype=obj`` + ``ld.lld-22 -shared`` per job, W at a time
  ours-compile our compile side alone on the same IR: ``compile_ir`` + ``isa_stats`` in W
               loky workers (warm pool), each job reporting its phase timings
  build W      ``wgradcache.pipeline.build.build`` on the same specs, fresh cache, W workers, in a
               fresh process (so it pays what ``wgradcache build`` pays: pool start-up,
               emission in the workers, publishing)
  build W llc  the same build with ``WGRADCACHE_CODEGEN=llc WGRADCACHE_LINKER=subprocess``:
               an ``llc-22`` and an ``ld.lld-22`` process per job instead of in-process
               codegen and linking, everything else identical (the subprocess pipeline at
               the same parallelism, with the same emission, listing and publishing)
  build 1      the same with 1 worker
  scaling      W processes compiling one job at once vs one process (what this machine
               gives LLVM codegen: the ceiling of build 1 / build W)

``--llvmlite`` adds ``ours-llvmlite``: ours-compile with codegen through llvmlite's LLVM (an
assertions build; the fallback when no libLLVM-22 loads) instead of the system libLLVM-22.

and prints (1) build W and ours-compile against llc+lld, and how close build W comes to
its floor, the codegen seconds of ours-compile divided by W; (2) build W against build 1;
(4) the time split of our pipeline summed over the jobs, per variant and per load width.
``--full`` adds (3): the full build of the target's default cache against its no-op
rebuild, both through the CLI (``python -m wgradcache build``); with ``--cache-dir`` an
existing full cache is reused and its full-build time read from its ``stats.jsonl``.

This machine has 2 cores and other sessions may be using them: compare the ratios of one
run (all sides see the same load), not seconds across runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from codegen import spread_specs

from wgradcache.cache.store import TargetCache
from wgradcache.compile.toolchain import with_code_object_version
from wgradcache.model.spec import KernelSpec
from wgradcache.pipeline.build import BuildRequest, select_jobs

PHASES = ("build_kernel", "lower", "parse", "codegen", "listing", "link", "read", "isa_stats")


@dataclass(frozen=True)
class EmittedJob:
    spec: KernelSpec
    ir: str
    seconds: dict  # build_kernel, lower


def emit_jobs(specs: list[KernelSpec]) -> list[EmittedJob]:
    """Emit every job's IR here, timing its two halves (what ``emit.emit_ir`` calls)."""
    from wgradcache.kernel.lower_llvm import lower
    from wgradcache.wgrad.kernel import build_kernel

    out = []
    for spec in specs:
        t0 = time.perf_counter()
        kdef = build_kernel(spec)
        t1 = time.perf_counter()
        ir = lower(kdef, spec.target)
        t2 = time.perf_counter()
        out.append(EmittedJob(spec, ir, {"build_kernel": t1 - t0, "lower": t2 - t1}))
    return out


# ---- llc + lld ----------------------------------------------------------------------

def _tool(name: str) -> str:
    found = shutil.which(name)
    if not found:
        sys.exit(f"benchmark needs {name} on PATH (Debian packages llvm-22, lld-22)")
    return found


def run_llc_lld(jobs: list[EmittedJob], workers: int, workdir: Path) -> tuple[float, list[bytes]]:
    """Wall seconds of the subprocess pipeline over all jobs, ``workers`` jobs at a time."""
    llc, lld = _tool("llc-22"), _tool("ld.lld-22")
    paths = []
    for i, job in enumerate(jobs):  # written before the clock starts
        path = workdir / f"job{i}.ll"
        path.write_text(with_code_object_version(job.ir))
        paths.append(path)

    def one(i: int) -> bytes:
        ll, obj, so = paths[i], paths[i].with_suffix(".o"), paths[i].with_suffix(".hsaco")
        subprocess.run([llc, "-O3", "-mtriple=amdgcn-amd-amdhsa",
                        f"-mcpu={jobs[i].spec.target}", "-filetype=obj", str(ll), "-o",
                        str(obj)], check=True)
        subprocess.run([lld, "-shared", str(obj), "-o", str(so)], check=True)
        return so.read_bytes()

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        out = list(pool.map(one, range(len(jobs))))
    return time.perf_counter() - t0, out


# ---- our compile side alone -----------------------------------------------------------

def _compile_timed(target: str, ir: str, backend: str = "libllvm") -> tuple[bytes, dict]:
    """In a loky worker: what ``workers.job_task`` compiles, with its phases timed."""
    from wgradcache.compile.codegen import CodegenOptions, compile_ir
    from wgradcache.compile.toolchain import CODEGEN_ENV
    from wgradcache.model.backends import backend_of

    os.environ[CODEGEN_ENV] = backend
    obj = compile_ir(ir, target, CodegenOptions())
    t0 = time.perf_counter()
    backend_of(target).isa_stats(obj.asm, obj.listing)
    t = {k: v for k, v in obj.timings.items() if k != "total"}
    t["isa_stats"] = time.perf_counter() - t0
    return obj.hsaco, t


def _warm() -> int:
    import wgradcache.compile.codegen  # noqa: F401 - import cost, not LLVM's

    return os.getpid()


def run_ours_compile(jobs: list[EmittedJob], workers: int, backend: str = "libllvm"
                     ) -> tuple[float, list[bytes], list[dict]]:
    import joblib

    with joblib.parallel_config(backend="loky"):
        joblib.Parallel(n_jobs=workers)(joblib.delayed(_warm)() for _ in range(workers))
        t0 = time.perf_counter()
        res = joblib.Parallel(n_jobs=workers, batch_size=1, pre_dispatch="2*n_jobs")(
            joblib.delayed(_compile_timed)(j.spec.target, j.ir, backend) for j in jobs)
        wall = time.perf_counter() - t0
    return wall, [r[0] for r in res], [r[1] for r in res]


# ---- our build, in a fresh process ----------------------------------------------------

_CHILD = """
import json, sys, time
from wgradcache.pipeline.build import BuildRequest, build
from wgradcache.model.spec import from_label
labels, cache_dir, workers = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
specs = [from_label(x) for x in labels]
t0 = time.perf_counter()
s = build(BuildRequest(target=specs[0].target, jobs=workers, cache_dir=cache_dir), specs=specs)
print(json.dumps({**s.to_json(), "failures": s.failures, "wall": time.perf_counter() - t0,
                  "phases": s.phases}))
"""


def run_build(specs: list[KernelSpec], workers: int, cache_dir: Path,
              backend: str = "libllvm") -> dict:
    """``build()`` in a new interpreter; ``wall`` is the call, ``process`` the whole process.
    ``backend``: what runs codegen (``$WGRADCACHE_CODEGEN``; "llc": an ``llc-22`` and an
    ``ld.lld-22`` process per job, ``$WGRADCACHE_LINKER=subprocess``)."""
    from wgradcache.compile.lldlink import LINKER_ENV
    from wgradcache.compile.toolchain import CODEGEN_ENV

    linker = "subprocess" if backend == "llc" else os.environ.get(LINKER_ENV, "auto")

    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps([s.label() for s in specs]),
                           str(cache_dir), str(workers)], capture_output=True, text=True,
                          env={**os.environ, CODEGEN_ENV: backend, LINKER_ENV: linker})
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"build with {workers} workers failed:\n{proc.stderr}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    if res["failed"] or res["built"] + res["relinked"] != len(specs):
        print(f"warning: build {workers}: {res}", file=sys.stderr)
    return {**res, "process": elapsed}


_CHILD_SCALING = """
import sys, time
from wgradcache.compile.codegen import compile_ir
from wgradcache.wgrad.emit import emit_ir
from wgradcache.model.spec import from_label
spec = from_label(sys.argv[1])
ir = emit_ir(spec).ir_text
compile_ir(ir, spec.target)
t0, n = time.perf_counter(), 0
while time.perf_counter() - t0 < float(sys.argv[2]):
    compile_ir(ir, spec.target)
    n += 1
print(n / (time.perf_counter() - t0))
"""
SCALING_LABEL = "gfx1250-fp16-t128x32x64-w2x1-v8x8-sync-cshuffle-none"


def machine_scaling(workers: int, seconds: float = 12.0) -> float:
    """Throughput of ``workers`` processes compiling the same job at once over one process:
    what this machine gives LLVM codegen (its working set shares caches and memory), the
    ceiling for ``build 1 / build W`` apart from the pure-Python phases."""
    def run(n: int) -> float:
        procs = [subprocess.Popen([sys.executable, "-c", _CHILD_SCALING, SCALING_LABEL,
                                   str(seconds)], stdout=subprocess.PIPE, text=True)
                 for _ in range(n)]
        return sum(float(p.communicate()[0]) for p in procs)
    return run(workers) / run(1)


def cache_blobs(cache_dir: Path, target: str, specs: list[KernelSpec]) -> list[bytes | None]:
    cache = TargetCache(cache_dir, target)
    out = []
    for s in specs:
        entry = cache.read_entry(s.identity_key())
        out.append(cache.read_blob(entry.blob) if entry else None)
    return out


# ---- the full cache -------------------------------------------------------------------

def _cli_build(target: str, cache_dir: Path) -> tuple[float, dict]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "wgradcache", "build", "--target", target,
                           "--cache-dir", str(cache_dir), "--json"],
                          capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if not lines:
        sys.exit(f"wgradcache build failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return elapsed, json.loads(lines[-1])


def cache_bytes(cache_dir: Path, target: str) -> dict:
    cache = TargetCache(cache_dir, target)

    def total(d: Path, pattern: str) -> tuple[int, int]:
        files = list(d.glob(pattern)) if d.is_dir() else []
        return len(files), sum(f.stat().st_size for f in files)

    nb, blobs = total(cache.blobs, "*.hsaco")
    _, sidecars = total(cache.blobs, "*.json")
    ne, entries = total(cache.entries, "*.json")
    return {"blobs": nb, "blob_bytes": blobs, "sidecar_bytes": sidecars, "entries": ne,
            "entry_bytes": entries}


def full_floor(runs: list[dict], full_s: float) -> None:
    """The full build against its codegen floor, from the phases its runs recorded."""
    phases: dict[str, float] = {}
    for r in runs:
        for k, v in r.get("phases", {}).items():
            phases[k] = phases.get(k, 0.0) + v
    if not phases.get("codegen"):
        print("  (no phase record in stats.jsonl: built before phases were recorded)")
        return
    workers = {r.get("request", {}).get("jobs") or os.cpu_count() for r in runs}
    w = max(workers)
    floor = phases["codegen"] / w
    total = sum(phases.values())
    print(f"  codegen floor (sum of codegen {phases['codegen']:.1f} s / {w}) {floor:.1f} s: "
          f"the full build is {full_s / floor:.2f}x of it (goal <= 1.10)")
    print("  workers' seconds by phase: " + ", ".join(
        f"{k} {v:.1f} s ({100 * v / total:.1f} %)" for k, v in
        sorted(phases.items(), key=lambda kv: -kv[1])))
    for line in floor_budget(phases, full_s, w):
        print("  " + line)


def floor_budget(phases: dict[str, float], wall: float, workers: int) -> list[str]:
    """What the floor goal leaves for everything but codegen, from one build's recorded
    phases (stats.jsonl), and the ratio if a phase cost nothing: how far each lever goes."""
    cg = phases["codegen"]
    floor = cg / workers
    rest = wall * workers - cg  # every other core-second: phases, start-up, IPC, idle
    other_phases = sum(phases.values()) - cg
    llvm = sum(phases.get(k, 0.0) for k in ("parse", "codegen", "link"))
    lines = [f"budget: the goal allows {0.1 * cg:.1f} core-s besides codegen; this build "
             f"spent {rest:.1f} ({100 * rest / cg:.1f} % of codegen): phases "
             f"{other_phases:.1f}, start-up/IPC/idle {rest - other_phases:.1f}"]
    levers = ("emit", "listing", "isa_stats")
    for k in levers:
        if phases.get(k):
            lines.append(f"  with {k} free: {(wall - phases[k] / workers) / floor:.2f}x")
    free = sum(phases.get(k, 0.0) for k in levers)
    lines.append(f"  with {', '.join(levers)} all free: {(wall - free / workers) / floor:.2f}x")
    lines.append(f"against the LLVM floor (parse + codegen + link: what llc + ld.lld do) "
                 f"{llvm:.1f} s / {workers}: {wall / (llvm / workers):.2f}x")
    return lines


def full_and_noop(target: str, cache_dir: Path | None, noop_runs: int) -> None:
    """(3): build the whole default cache (or resume it), then time no-op rebuilds."""
    tmp = None
    if cache_dir is None:
        tmp = tempfile.mkdtemp(prefix="wgc-full-")
        cache_dir = Path(tmp)
    try:
        n_jobs = len(select_jobs(BuildRequest(target=target)))
        print(f"\n(3) full {target} cache in {cache_dir}: {n_jobs} jobs (count)")
        first_wall, first = _cli_build(target, cache_dir)
        stats = TargetCache(cache_dir, target).stats()
        if first["built"] or first["relinked"]:
            print(f"  this run built {first['built']}, relinked {first['relinked']}, up to date "
                  f"{first['up_to_date']}, failed {first['failed']}: {first_wall:.1f} s")
        runs = [r for r in stats if r.get("built", 0) > 0]
        full_s = sum(r["seconds"] for r in runs)
        print(f"  full build: {full_s:.1f} s over {len(runs)} run(s) that compiled "
              f"(stats.jsonl; an interrupted run is not recorded), "
              f"{sum(r['built'] for r in runs)} blobs built")
        print("  cache: " + ", ".join(f"{k} {v}" for k, v in cache_bytes(cache_dir,
                                                                        target).items()))
        full_floor(runs, full_s)
        walls, inner = [], []
        for _ in range(noop_runs):
            w, res = _cli_build(target, cache_dir)
            walls.append(w)
            inner.append(res["seconds"])
            if res["up_to_date"] + res["failed"] + res["rejected"] != res["jobs"]:
                print(f"  warning: not a no-op ({res}); did the generator sources change?")
        w, i = statistics.median(walls), statistics.median(inner)
        print(f"  no-op rebuild (median of {noop_runs}): process {w:.2f} s, build() {i:.2f} s "
              f"= {100 * w / full_s:.3f} % of the full build (goal <= 1 % and < 2 s)"
              if full_s else f"  no-op rebuild: process {w:.2f} s, build() {i:.2f} s")
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


# ---- report -------------------------------------------------------------------------

def _group_table(title: str, keyf, jobs: list[EmittedJob], phases: list[dict]) -> None:
    rows: dict[str, list[tuple[dict, dict]]] = {}
    for job, ph in zip(jobs, phases, strict=True):
        rows.setdefault(keyf(job.spec), []).append((job.seconds, ph))
    print(f"\n{title:24s} {'n':>3s} {'emit ms':>8s} {'codegen ms':>11s} {'job ms':>8s}  (means)")
    for key in sorted(rows, key=lambda k: -statistics.mean(p["codegen"] for _, p in rows[k])):
        r = rows[key]
        emit = statistics.mean(e["build_kernel"] + e["lower"] for e, _ in r)
        cg = statistics.mean(p["codegen"] for _, p in r)
        tot = statistics.mean(sum(e.values()) + sum(p.values()) for e, p in r)
        print(f"{key:24s} {len(r):3d} {emit * 1e3:8.0f} {cg * 1e3:11.0f} {tot * 1e3:8.0f}")


def _vec_key(s: KernelSpec) -> str:
    return (f"sync v{s.vec_a}x{s.vec_b}" if s.k_loop == "sync"
            else f"async c{s.chunk_a}x{s.chunk_b}")


def report(jobs, workers, ref, ours, build_w, build_1, phases, protos=None,
           build_llc=None, scaling=None) -> None:
    n = len(jobs)
    sums = {k: 0.0 for k in PHASES}
    for job, ph in zip(jobs, phases, strict=True):
        for k, v in {**job.seconds, **ph}.items():
            sums[k] += v
    codegen_floor = sums["codegen"] / workers
    bw = build_w["wall"]
    print(f"\n{n} jobs, {workers} workers, {os.cpu_count()} cores (shared with other sessions: "
          f"read the ratios)")
    print(f"(1) llc+lld {ref:.1f} s | ours-compile {ours:.1f} s | build {workers} {bw:.1f} s "
          f"(process {build_w['process']:.1f} s)")
    if build_llc:
        bl = build_llc["wall"]
        print(f"    build {workers} with llc + ld.lld subprocesses (same orchestration: emit, "
              f"llc, ld.lld, listing, publish) {bl:.1f} s: speed-up of our build "
              f"{bl / bw:.2f}x (goal >= 1.0)")
    print(f"    speed-up of build {workers} over bare llc+lld: {ref / bw:.2f}x (the build also "
          f"emits the IR, lists and publishes; llc+lld does not)")
    print(f"    speed-up of ours-compile over llc+lld: {ref / ours:.2f}x (same IR, same work)")
    print(f"    codegen floor (sum of codegen {sums['codegen']:.1f} s / {workers}) "
          f"{codegen_floor:.1f} s: build {workers} is {bw / codegen_floor:.2f}x of it, "
          f"ours-compile {ours / codegen_floor:.2f}x (goal <= 1.10)")
    own = build_w.get("phases", {}).get("codegen")
    if own:
        print(f"    the build's own codegen (its workers' record, stats.jsonl) {own:.1f} s / "
              f"{workers} = {own / workers:.1f} s: build {workers} is "
              f"{bw / (own / workers):.2f}x of that floor")
        for line in floor_budget(build_w["phases"], bw, workers):
            print("    " + line)
    print(f"(2) build 1 {build_1['wall']:.1f} s / build {workers} {bw:.1f} s = "
          f"{build_1['wall'] / bw:.2f}x (goal >= 1.8)")
    if scaling:
        print(f"    this machine: {workers} processes compiling one job at once give "
              f"{scaling:.2f}x the codegen throughput of one (LLVM shares caches and memory "
              f"bandwidth; a pure-Python loop scales ~{workers}x)")
    if protos:
        lite_wall, lite_phases = protos
        lite_cg = sum(p["codegen"] for p in lite_phases)
        print(f"    ours-llvmlite (codegen in llvmlite's LLVM) {lite_wall:.1f} s = "
              f"{ref / lite_wall:.2f}x llc+lld; its codegen {lite_cg:.1f} s = "
              f"{lite_cg / sums['codegen']:.2f}x of libLLVM's")
    total = sum(sums.values())
    print(f"(4) where our time goes, summed over the {n} jobs (emit serial here, the rest "
          f"in the ours-compile workers):")
    for k in PHASES:
        print(f"    {k:13s} {sums[k]:8.2f} s {100 * sums[k] / total:6.1f} %")
    print(f"    {'total':13s} {total:8.2f} s; build {workers} x {workers} workers = "
          f"{bw * workers:.2f} core-s, build 1 = {build_1['wall']:.2f} s")
    _group_table("variant", lambda s: f"{s.variant} {s.dtype_key}", jobs, phases)
    _group_table("load width", _vec_key, jobs, phases)
    order = sorted(range(n), key=lambda i: -phases[i]["codegen"])[:5]
    print("\nmost expensive jobs (codegen s, emit s, IR kB):")
    for i in order:
        e = jobs[i].seconds
        print(f"  {phases[i]['codegen']:6.2f} {e['build_kernel'] + e['lower']:6.2f} "
              f"{len(jobs[i].ir) / 1e3:7.0f}  {jobs[i].spec.label()}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="Never run by the test suite.")
    ap.add_argument("--quick", action="store_true", help="10 jobs (a minute or two)")
    ap.add_argument("--count", type=int, default=None, help="jobs in the subset (default 40)")
    ap.add_argument("--target", default="gfx1250")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1, help="cycles of the four sides; median")
    ap.add_argument("--full", action="store_true",
                    help="also (3): full build of the default cache and its no-op rebuild "
                         "(20-40 min on 2 cores unless --cache-dir holds a full cache)")
    ap.add_argument("--cache-dir", type=Path, default=None,
                    help="with --full: the full cache to build, resume or reuse")
    ap.add_argument("--noop-runs", type=int, default=3)
    ap.add_argument("--skip-subset", action="store_true", help="with --full: only (3)")
    ap.add_argument("--save", type=Path, default=None,
                    help="write the per-job figures (median cycle) and the sides as JSON")
    ap.add_argument("--llvmlite", action="store_true",
                    help="also time ours-compile with codegen in llvmlite's LLVM")
    args = ap.parse_args(argv)

    if not args.skip_subset:
        n = args.count or (10 if args.quick else 40)
        specs = spread_specs(select_jobs(BuildRequest(target=args.target)), n)
        print(f"emitting {len(specs)} jobs ...", flush=True)
        jobs = emit_jobs(specs)
        refs, ourss, b_w, b_1, lites, bls = [], [], [], [], [], []
        with tempfile.TemporaryDirectory(prefix="wgc-benchbuild-") as tmp:
            tmpd = Path(tmp)
            for r in range(args.repeat):
                work = tmpd / f"llc{r}"
                work.mkdir()
                print(f"cycle {r + 1}/{args.repeat}: llc+lld ...", flush=True)
                ref, ref_bytes = run_llc_lld(jobs, args.workers, work)
                print("  ours-compile ...", flush=True)
                ours, our_bytes, phases = run_ours_compile(jobs, args.workers)
                print(f"  build {args.workers} ...", flush=True)
                bw = run_build(specs, args.workers, tmpd / f"w{r}")
                print(f"  build {args.workers} with llc ...", flush=True)
                bls.append(run_build(specs, args.workers, tmpd / f"llcw{r}", "llc"))
                print("  build 1 ...", flush=True)
                b1 = run_build(specs, 1, tmpd / f"one{r}")
                built = cache_blobs(tmpd / f"w{r}", args.target, specs)
                same = sum(a == b for a, b in zip(ref_bytes, our_bytes, strict=True))
                same_b = sum(a == b for a, b in zip(our_bytes, built, strict=True))
                line = (f"  llc+lld {ref:.1f} s, ours-compile {ours:.1f} s, build "
                        f"{args.workers} {bw['wall']:.1f} s, build {args.workers} with llc "
                        f"{bls[-1]['wall']:.1f} s, build 1 {b1['wall']:.1f} s")
                if args.llvmlite:
                    print("  ours-llvmlite ...", flush=True)
                    lite_wall, lite_bytes, lite_phases = run_ours_compile(jobs, args.workers,
                                                                          "llvmlite")
                    lites.append((lite_wall, lite_phases))
                    same_s = sum(a == b for a, b in zip(ref_bytes, lite_bytes, strict=True))
                    line += (f", ours-llvmlite {lite_wall:.1f} s "
                             f"(identical to llc+lld: {same_s}/{len(jobs)})")
                print(line)
                by_llc = cache_blobs(tmpd / f"llcw{r}", args.target, specs)
                same_l = sum(a == b for a, b in zip(built, by_llc, strict=True))
                print(f"  identical code objects: llc+lld vs ours-compile {same}/{len(jobs)}, "
                      f"ours-compile vs build {same_b}/{len(jobs)}, build vs build with llc "
                      f"{same_l}/{len(jobs)}")
                refs.append(ref)
                ourss.append((ours, phases))
                b_w.append(bw)
                b_1.append(b1)
        mid = statistics.median_low
        ours_wall = mid(o[0] for o in ourss)
        phases = next(p for w, p in ourss if w == ours_wall)
        bw = sorted(b_w, key=lambda b: b["wall"])[(len(b_w) - 1) // 2]
        b1 = sorted(b_1, key=lambda b: b["wall"])[(len(b_1) - 1) // 2]
        protos = None
        if args.llvmlite:
            lite_wall = mid(w for w, _ in lites)
            protos = (lite_wall, next(p for w, p in lites if w == lite_wall))
        bl = sorted(bls, key=lambda b: b["wall"])[(len(bls) - 1) // 2]
        print("machine scaling probe ...", flush=True)
        scaling = machine_scaling(args.workers)
        report(jobs, args.workers, mid(refs), ours_wall, bw, b1, phases, protos, bl, scaling)
        if args.save:
            args.save.write_text(json.dumps({
                "workers": args.workers, "llc_lld": refs, "ours_compile": [w for w, _ in ourss],
                "build_w": b_w, "build_1": b_1, "build_w_llc": bls,
                "ours_llvmlite": [w for w, _ in lites],
                "jobs": [{"label": j.spec.label(), "ir_bytes": len(j.ir), **j.seconds, **ph}
                         for j, ph in zip(jobs, phases, strict=True)]}, indent=1))
    if args.full:
        full_and_noop(args.target, args.cache_dir, args.noop_runs)


if __name__ == "__main__":
    main()
