"""Time our per-job codegen pipeline against ``llc-22`` + ``ld.lld-22`` on the same IR.

    python benchmarks/codegen.py [--repeat N] [FILE.ll[@TARGET] ...]

Every pipeline compiles every job ``--repeat`` times, interleaved (job by job, pipeline by
pipeline) so the noise of this 2-core box hits all of them alike; per job the median is
kept, and the table shows the sum of the medians and its ratio to ``llc+lld``. Wall time is
what one job waits; CPU time (this process plus its children) is what a full build pays,
since every core is busy then.

Pipelines:
  ours           compile_ir: in-process codegen, ld.lld started before codegen and fed
                 through a pipe, listing from the in-process disassembler
  ours-late      same, linker started after codegen (its start-up no longer overlaps)
  ours-objdump   listing from llvm-objdump (started before codegen, fed through a pipe)
  ours-asm       listing from a second in-process codegen (emit_assembly)
  ours-obj       code object only (listing="none"), the like-for-like of llc+lld
  llc+lld        llc-22 -O3 -filetype=obj to a file, then ld.lld-22 -shared (the reference)
  llc|lld        llc writes the object into a pipe that ld.lld-22 reads
  llc+lld+dis    llc+lld plus llvm-objdump-22: the same artefacts as ``ours``

``load_ir_jobs()`` is the IR source; the project replaces it to time the real kernels.
"""

from __future__ import annotations

import argparse
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
from wgradcache.compile.samples import gemm_kernel, mma_kernel
from wgradcache.compile.toolchain import with_code_object_version


@dataclass(frozen=True)
class IrJob:
    name: str
    target: str
    ir: str


def load_ir_jobs() -> list[IrJob]:
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
            "ours-late": lambda j: codegen._compile(j.ir, j.target, opts, "auto",
                                                    early_tools=False).hsaco,
            "ours-objdump": lambda j: codegen._compile(j.ir, j.target, opts, "auto", True,
                                                       lister="objdump").hsaco,
            "ours-asm": lambda j: compile_ir(j.ir, j.target, opts, listing="assembly").hsaco,
            "ours-obj": lambda j: compile_ir(j.ir, j.target, opts, listing="none").hsaco,
            "llc+lld": lambda j: self._llc_lld(j, disassemble=False),
            "llc|lld": self._llc_pipe_lld,
            "llc+lld+dis": lambda j: self._llc_lld(j, disassemble=True),
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


def _phases(jobs: list[IrJob], repeat: int) -> dict[str, float]:
    """Median per job of compile_ir's own timings, summed over jobs (where ours spends)."""
    sums: dict[str, float] = {}
    for job in jobs:
        runs = [compile_ir(job.ir, job.target).timings for _ in range(repeat)]
        for key in runs[0]:
            sums[key] = sums.get(key, 0.0) + statistics.median(r[key] for r in runs)
    return sums


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", help="LLVM IR files, FILE.ll or FILE.ll@TARGET")
    ap.add_argument("--target", default="gfx1250", help="target of files without @TARGET")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--pipelines", default="", help="comma-separated subset")
    args = ap.parse_args(argv)
    jobs = _jobs_from_args(args.files, args.target) if args.files else load_ir_jobs()
    with tempfile.TemporaryDirectory(prefix="wgc-bench-") as tmp:
        pipes = Pipelines(Path(tmp)).table()
        if args.pipelines:
            pipes = {k: v for k, v in pipes.items() if k in args.pipelines.split(",")}
        for job in jobs:  # warm up: LLVM init, target machines, page cache of the tools
            compile_ir(job.ir, job.target)
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
        phases = _phases(jobs, args.repeat)

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
    print("ours, where the wall time goes (s): "
          + ", ".join(f"{k} {v:.3f}" for k, v in phases.items()))
    print(f"\n{'job':32s} " + " ".join(f"{p:>11s}" for p in pipes) + "   (median wall ms)")
    for job in jobs:
        print(f"{job.name:32s} " + " ".join(
            f"{statistics.median(wall[p][job.name]) * 1e3:11.1f}" for p in pipes))


if __name__ == "__main__":
    main()
