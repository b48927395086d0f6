"""Time our per-job codegen pipeline against ``llc-22`` + ``ld.lld-22`` on the same IR.

    python benchmarks/codegen.py [--repeat N] [--source walk|handwritten] [FILE.ll[@TARGET] ...]

Every pipeline compiles every job ``--repeat`` times, interleaved (job by job, pipeline by
pipeline) so the noise of this 2-core box hits all of them alike; per job the median is
kept, and the table shows the sum of the medians and its ratio to ``llc+lld``. Wall time is
what one job waits; CPU time (this process plus its children) is what a full build pays,
since every core is busy then.

Pipelines:
  ours           compile_ir: in-process codegen through the system libLLVM-22 (Debian's, no
                 assertions: what llc-22 runs on), LLD in-process (``lldlink``), listing
                 from the in-process disassembler
  ours-lldproc   same with an ld.lld-22 process started before codegen and fed through a
                 pipe (``WGRADCACHE_LINKER=subprocess``: the fallback without liblld-22-dev)
  ours-late      ours-lldproc with the linker started after codegen (no overlap)
  ours-objdump   listing from llvm-objdump (started before codegen, fed through a pipe)
  ours-asm       listing from a second in-process codegen (emit_assembly)
  ours-obj       code object only (listing="none"), the like-for-like of llc+lld
  llc+lld        llc-22 -O3 -filetype=obj to a file, then ld.lld-22 -shared (the reference)
  llc|lld        llc writes the object into a pipe that ld.lld-22 reads
  llc+lld+dis    llc+lld plus llvm-objdump-22: the same artefacts as ``ours``
  ours-llvmlite  ours with codegen through llvmlite's LLVM (an assertions build), the
                 fallback when no libLLVM-22 loads (``WGRADCACHE_CODEGEN=llvmlite``)

``load_ir_jobs()`` is the IR source: by default (``--source walk``) the 20 gfx1250 jobs of
``WALK_LABELS``, real kernels from our walk emitted with ``wgradcache.wgrad.emit.emit_ir``;
``--source handwritten`` gives the earlier hand-written kernels (``compile.samples``, several
targets), kept to compare with figures measured before the generators existed.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from wgradcache.compile import codegen
from wgradcache.compile.codegen import CodegenOptions, compile_ir
from wgradcache.compile.lldlink import LINKER_ENV
from wgradcache.compile.samples import gemm_kernel, mma_kernel
from wgradcache.compile.toolchain import CODEGEN_ENV, with_code_object_version
from wgradcache.model.spec import KernelSpec, from_label


@dataclass(frozen=True)
class IrJob:
    name: str
    target: str
    ir: str
    emit_s: float = 0.0  # seconds emit_ir took (walk jobs), for the time split


# The first 20 of ``spread_specs(walk("gfx1250"), 20)`` when this list was made: every
# variant in both dtypes, tiles 32..128, sync vec pairs 8x8/4x4/8x1/1x1 and async chunks
# 16x16/4x4. Frozen so that figures from different days time the same kernels.
WALK_LABELS = (
    "gfx1250-fp16-t32x32x32-w1x1-v8x8-sync-default-none",
    "gfx1250-bf16-t64x32x32-w2x2-v4x4-sync-default-atomic",
    "gfx1250-fp16-t128x32x64-w2x1-v8x8-sync-cshuffle-none",
    "gfx1250-bf16-t32x64x32-w1x2-v8x8-sync-cshuffle-atomic",
    "gfx1250-fp16-t64x64x32-w2x2-v8x8-sync-default-two_stage-wsr8",
    "gfx1250-bf16-t128x64x64-w4x2-c16x16-async-default-none",
    "gfx1250-fp16-t32x128x32-w1x4-c16x16-async-default-atomic",
    "gfx1250-bf16-t64x128x32-w2x2-c16x16-async-cshuffle-none",
    "gfx1250-fp16-t128x128x64-w4x2-c16x16-async-cshuffle-atomic",
    "gfx1250-bf16-t32x128x64-w2x4-v8x1-sync-default-none",
    "gfx1250-fp16-t64x128x64-w2x4-v8x8-sync-default-atomic",
    "gfx1250-bf16-t32x32x64-w1x1-v4x4-sync-cshuffle-none",
    "gfx1250-fp16-t64x64x32-w1x2-v8x8-sync-cshuffle-atomic",
    "gfx1250-bf16-t128x64x32-w2x2-v4x4-sync-default-two_stage-wsr8",
    "gfx1250-fp16-t32x64x64-w2x2-c16x16-async-default-none",
    "gfx1250-bf16-t64x64x64-w2x2-c16x16-async-default-atomic",
    "gfx1250-fp16-t128x128x32-w2x4-c16x16-async-cshuffle-none",
    "gfx1250-bf16-t32x128x64-w1x2-c4x4-async-cshuffle-atomic",
    "gfx1250-fp16-t64x64x64-w4x2-v8x1-sync-default-none",
    "gfx1250-bf16-t128x128x64-w2x4-v1x1-sync-default-atomic",
)


def spread_specs(specs: list[KernelSpec], n: int) -> list[KernelSpec]:
    """``n`` specs spread over (variant, dtype) groups and, within a group, over its list.

    Groups are visited round-robin, variants first with the dtypes alternating, so any
    prefix covers as many variants as it can; within a group the picks step by the golden
    ratio through the walk order (geometry, then widths), so they land on different tiles
    and vec pairs. Deterministic: the same walk gives the same jobs.
    """
    groups: dict[tuple[str, str], list[KernelSpec]] = {}
    for s in specs:
        groups.setdefault((s.variant, s.dtype_key), []).append(s)
    variants = list(dict.fromkeys(v for v, _ in groups))
    dtypes = list(dict.fromkeys(d for _, d in groups))
    order = [(v, dtypes[(i + shift) % len(dtypes)])
             for shift in range(len(dtypes)) for i, v in enumerate(variants)]
    order = [k for k in order if k in groups]
    used: dict[tuple[str, str], set[int]] = {k: set() for k in order}
    phi = (math.sqrt(5) - 1) / 2
    picked: list[KernelSpec] = []
    n = min(n, len(specs))
    r = 0
    while len(picked) < n:
        for gi, key in enumerate(order):
            group = groups[key]
            if len(picked) >= n or len(used[key]) == len(group):
                continue
            j = int(((r * phi + gi * 0.37) % 1.0) * len(group))
            while j in used[key]:
                j = (j + 1) % len(group)
            used[key].add(j)
            picked.append(group[j])
        r += 1
    return picked


def walk_ir_jobs(labels: tuple[str, ...] = WALK_LABELS) -> list[IrJob]:
    """Real kernels: each label's spec emitted with ``emit_ir`` (as a build worker does).

    A label the walk no longer produces is still emitted (the spec is what it names), with
    a warning, so an edit of geometries.yaml does not silently change what is timed.
    """
    from wgradcache.jobs import walk
    from wgradcache.wgrad.emit import emit_ir

    specs = [from_label(label) for label in labels]
    in_walk = {s.identity_key() for t in {s.target for s in specs} for s in walk(t)}
    for s in specs:
        if s.identity_key() not in in_walk:
            print(f"warning: {s.label()} is no longer in the walk", file=sys.stderr)
    for s in specs:  # warm: imports and the first-call caches are not emission
        emit_ir(s)
    jobs = []
    for s in specs:
        t0 = time.perf_counter()
        ir = emit_ir(s).ir_text
        jobs.append(IrJob(s.label(), s.target, ir, time.perf_counter() - t0))
    return jobs


def load_ir_jobs(source: str = "walk") -> list[IrJob]:
    """The benchmark's IR: ``walk`` (real kernels, default) or ``handwritten``."""
    if source == "walk":
        return walk_ir_jobs()
    if source == "handwritten":
        return handwritten_ir_jobs()
    raise ValueError(f"source must be walk or handwritten, got {source!r}")


def handwritten_ir_jobs() -> list[IrJob]:
    """~20 hand-written kernels of realistic size (unrolled MMA main loops, epilogues)."""
    g = gemm_kernel
    jobs = [
        ("1250-mma1", "gfx1250", mma_kernel("gfx1250")),
        ("1250-128x128x64", "gfx1250", g("gfx1250", tile_k=64)),
        ("1250-128x128x128", "gfx1250", g("gfx1250", tile_k=128)),
        ("1250-128x128x128-async", "gfx1250", g("gfx1250", tile_k=128, async_copy=True)),
        ("1250-128x128x64-async-atomic", "gfx1250",
         g("gfx1250", tile_k=64, async_copy=True, atomic=True)),
        ("1250-128x128x64-bf16-atomic", "gfx1250", g("gfx1250", "bf16", tile_k=64, atomic=True)),
        ("1250-64x64x64", "gfx1250", g("gfx1250", tile_m=64, tile_n=64, tile_k=64)),
        ("1250-256x128x64", "gfx1250", g("gfx1250", tile_m=256, tile_k=64, warps_m=4)),
        ("1250-128x256x32-async", "gfx1250",
         g("gfx1250", tile_n=256, tile_k=32, warps_n=4, async_copy=True)),
        ("1201-mma1", "gfx1201", mma_kernel("gfx1201")),
        ("1201-128x128x32", "gfx1201", g("gfx1201", tile_k=32)),
        ("1201-128x128x64-atomic", "gfx1201", g("gfx1201", tile_k=64, atomic=True)),
        ("1201-64x64x32-bf16", "gfx1201", g("gfx1201", "bf16", tile_m=64, tile_n=64, tile_k=32)),
        ("1151-mma1", "gfx1151", mma_kernel("gfx1151")),
        ("1151-128x128x32", "gfx1151", g("gfx1151", tile_k=32)),
        ("1151-64x64x32-atomic", "gfx1151", g("gfx1151", tile_m=64, tile_n=64, tile_k=32,
                                               atomic=True)),
        ("950-128x128x32", "gfx950", g("gfx950", tile_k=32)),
        ("950-64x64x64-bf16", "gfx950", g("gfx950", "bf16", tile_m=64, tile_n=64, tile_k=64)),
        ("942-mma1", "gfx942", mma_kernel("gfx942")),
        ("942-128x128x64", "gfx942", g("gfx942", tile_k=64)),
    ]
    return [IrJob(n, t, ir) for n, t, ir in jobs]


def _jobs_from_args(paths: list[str], default_target: str) -> list[IrJob]:
    jobs = []
    for p in paths:
        path, _, target = p.partition("@")
        jobs.append(IrJob(Path(path).stem, target or default_target, Path(path).read_text()))
    return jobs


def _with_env(name: str, value: str, fn, *args, **kwargs):
    """``fn`` with ``$name`` set to ``value`` (``$WGRADCACHE_CODEGEN`` and
    ``$WGRADCACHE_LINKER`` are read at every compile)."""
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        return fn(*args, **kwargs)
    finally:
        if old is None:
            del os.environ[name]
        else:
            os.environ[name] = old


def _with_backend(backend: str, fn, *args, **kwargs):
    """``fn`` with ``$WGRADCACHE_CODEGEN`` set to ``backend``."""
    return _with_env(CODEGEN_ENV, backend, fn, *args, **kwargs)


def _tool(name: str) -> str:
    found = shutil.which(name)
    if not found:
        sys.exit(f"benchmark needs {name} on PATH (Debian package llvm-22 / lld-22)")
    return found


class Pipelines:
    """Each pipeline is a callable(job, workdir) -> hsaco bytes."""

    def __init__(self, workdir: Path):
        self.dir = workdir
        self.llc, self.lld, self.objdump = (_tool("llc-22"), _tool("ld.lld-22"),
                                            _tool("llvm-objdump-22"))

    def table(self) -> dict[str, Callable[[IrJob], bytes]]:
        opts = CodegenOptions()
        return {
            "ours": lambda j: compile_ir(j.ir, j.target, opts).hsaco,
            "ours-lldproc": lambda j: _with_env(LINKER_ENV, "subprocess", compile_ir, j.ir,
                                                j.target, opts).hsaco,
            "ours-late": lambda j: _with_env(LINKER_ENV, "subprocess", codegen.compile_amdgpu,
                                             j.ir, j.target, opts, "auto",
                                             codegen.ToolStart(early=False)).hsaco,
            "ours-objdump": lambda j: codegen.compile_amdgpu(
                j.ir, j.target, opts, "auto", codegen.ToolStart(lister="objdump")).hsaco,
            "ours-asm": lambda j: compile_ir(j.ir, j.target, opts, listing="assembly").hsaco,
            "ours-obj": lambda j: compile_ir(j.ir, j.target, opts, listing="none").hsaco,
            "llc+lld": lambda j: self._llc_lld(j, disassemble=False),
            "llc|lld": self._llc_pipe_lld,
            "llc+lld+dis": lambda j: self._llc_lld(j, disassemble=True),
            "ours-llvmlite": lambda j: _with_backend("llvmlite", compile_ir, j.ir, j.target,
                                                     opts).hsaco,
        }

    def _ll(self, job: IrJob) -> Path:
        path = self.dir / f"{job.name}.ll"
        if not path.exists():
            path.write_text(with_code_object_version(job.ir))
        return path

    def _llc_argv(self, job: IrJob, out: str) -> list[str]:
        return [self.llc, "-O3", "-mtriple=amdgcn-amd-amdhsa", f"-mcpu={job.target}",
                "-filetype=obj", str(self._ll(job)), "-o", out]

    def _llc_lld(self, job: IrJob, disassemble: bool) -> bytes:
        obj, so = self.dir / f"{job.name}.o", self.dir / f"{job.name}.hsaco"
        subprocess.run(self._llc_argv(job, str(obj)), check=True)
        subprocess.run([self.lld, "-shared", str(obj), "-o", str(so)], check=True)
        if disassemble:
            subprocess.run([self.objdump, "-d", "--symbolize-operands", "--no-show-raw-insn",
                            str(obj)], check=True, capture_output=True)
        return so.read_bytes()

    def _llc_pipe_lld(self, job: IrJob) -> bytes:
        llc = subprocess.Popen(self._llc_argv(job, "-"), stdout=subprocess.PIPE)
        lld = subprocess.run([self.lld, "-shared", "/dev/stdin", "-o", "/dev/stdout"],
                             stdin=llc.stdout, capture_output=True, check=True)
        llc.stdout.close()
        if llc.wait() != 0:
            raise RuntimeError("llc failed")
        return lld.stdout


def _cpu() -> float:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def _measure(fn: Callable[[IrJob], bytes], job: IrJob) -> tuple[float, float, bytes]:
    c0, w0 = _cpu(), time.perf_counter()
    out = fn(job)
    return time.perf_counter() - w0, _cpu() - c0, out


def _phases(jobs: list[IrJob], repeat: int, backend: str) -> dict[str, float]:
    """Median per job of compile_ir's own timings, summed over jobs (where ours spends)."""
    sums: dict[str, float] = {}
    for job in jobs:
        runs = [_with_backend(backend, compile_ir, job.ir, job.target).timings
                for _ in range(repeat)]
        for key in runs[0]:
            sums[key] = sums.get(key, 0.0) + statistics.median(r[key] for r in runs)
    return sums


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", help="LLVM IR files, FILE.ll or FILE.ll@TARGET")
    ap.add_argument("--target", default="gfx1250", help="target of files without @TARGET")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--pipelines", default="", help="comma-separated subset")
    ap.add_argument("--source", choices=("walk", "handwritten"), default="walk",
                    help="IR when no files are given: 20 real jobs of our walk (default) "
                         "or the hand-written kernels")
    args = ap.parse_args(argv)
    jobs = (_jobs_from_args(args.files, args.target) if args.files
            else load_ir_jobs(args.source))
    with tempfile.TemporaryDirectory(prefix="wgc-bench-") as tmp:
        pipes = Pipelines(Path(tmp)).table()
        if args.pipelines:
            pipes = {k: v for k, v in pipes.items() if k in args.pipelines.split(",")}
        for job in jobs:  # warm up: LLVM init, target machines, page cache of the tools
            for backend in ("libllvm", "llvmlite"):
                _with_backend(backend, compile_ir, job.ir, job.target)
        wall: dict[str, dict[str, list[float]]] = {p: {j.name: [] for j in jobs} for p in pipes}
        cpu: dict[str, dict[str, list[float]]] = {p: {j.name: [] for j in jobs} for p in pipes}
        reference: dict[str, bytes] = {}
        for _ in range(args.repeat):
            for job in jobs:
                for name, fn in pipes.items():
                    w, c, out = _measure(fn, job)
                    wall[name][job.name].append(w)
                    cpu[name][job.name].append(c)
                    if reference.setdefault(job.name, out) != out:
                        print(f"warning: {name} gives other bytes for {job.name}")
        phases = {b: _phases(jobs, args.repeat, b) for b in ("libllvm", "llvmlite")}

    def total(table: dict[str, list[float]]) -> float:
        return sum(statistics.median(v) for v in table.values())

    base = "llc+lld" if "llc+lld" in pipes else next(iter(pipes))
    print(f"{len(jobs)} jobs, {args.repeat} runs each, {os.cpu_count()} cores; "
          f"sum over jobs of the per-job median")
    print(f"{'pipeline':14s} {'wall s':>8s} {'/' + base:>10s} {'cpu s':>8s} {'/' + base:>10s}")
    for name in pipes:
        w, c = total(wall[name]), total(cpu[name])
        print(f"{name:14s} {w:8.3f} {w / total(wall[base]):10.2f} {c:8.3f} "
              f"{c / total(cpu[base]):10.2f}")
    print(f"IR emission (emit_ir: build_kernel + lower), not in any pipeline above: "
          f"{sum(j.emit_s for j in jobs):.3f} s")
    for backend, sums in phases.items():
        print(f"ours ({backend}), where the wall time goes (s): "
              + ", ".join(f"{k} {v:.3f}" for k, v in sums.items()))
    width = max(len(j.name) for j in jobs)
    print(f"\n{'job':{width}s} " + " ".join(f"{p:>11s}" for p in pipes) + "   (median wall ms)")
    for job in jobs:
        print(f"{job.name:{width}s} " + " ".join(
            f"{statistics.median(wall[p][job.name]) * 1e3:11.1f}" for p in pipes))


if __name__ == "__main__":
    main()
