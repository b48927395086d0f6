"""How well the kernels feed their MMAs: main-loop figures of compiled kernels per target.

    python benchmarks/isa_quality.py [--count N] [--targets gfx1250,...] [--jobs W]
                                     [--save FILE] [--before FILE]
    python benchmarks/isa_quality.py --cache-dir cache [--save FILE] [--before FILE]

For a spread subset of each target's default walk (``codegen.spread_specs``: every variant
and dtype, tiles and load widths spread inside each), the kernels are emitted and compiled
here (``compile_ir``, W processes) and their main loop (``compile.isa.main_loop``: one K
tile) is read from the listing. Printed per target, min / median / max over the subset:

* main-loop instructions and VALU instructions per MMA (the async loop's steady state
  over whole tiles; its checked loop for the last one or two tiles is printed apart,
  "checked-tail"), LDS read instructions per MMA, the
  share of the reads narrower than 128 bits, exec-mask branches, barriers and waits per
  iteration, over the whole subset and over the kernels with wide loads only
  (sync v8x8 or async c16x16: 8-element global vectors, 16-byte copies);
* on gfx1250, for the 128x128 tiles of the subset (and every 128x128 fp16 kernel of the
  default-none variants, which are added to it): llvm-mca-22's estimate of cycles per
  main-loop iteration against the WMMA bound, 8 cycles per WMMA (its gfx1250 model gives
  v_wmma_f32_16x16x32 rthroughput 8; gfx1201 and gfx1151 model WMMA as a plain VALU op, so
  the estimate means nothing there and is not printed). Barriers are left out of the
  estimate (``_loop_text`` says why); global-load latency (320 in the model) is in it.
  Beside it, the model's floor for that loop: the estimate of its global loads, all in
  one group, and its MMAs alone (``_floor_text``). llvm-mca models gfx1250 as an in-order CPU that
  also retires in order (its InOrderIssueStage holds an instruction until every earlier
  one has written back), so each group of global loads costs its full 320-cycle latency
  in every iteration, whatever follows: with one load group and 16 WMMAs (128x128x64)
  the floor is 446 cycles, 3.5x the bound; no loop that loads in its body can reach 2x.

sm_90 (``--targets sm_90``) is read from nvdisasm's SASS (``cubin.sass_stats``): its rows are
the ones that reader counts (instructions, loads or cp.async copies, LDS reads, MMAs per loop
and per MMA, barriers; no VALU, wait or exec-branch counts), all and wide, and no llvm-mca.

With ``--cache-dir`` nothing is compiled: the figures are the ``isa`` of every entry of a
built cache (the whole walk of each target in it; no llvm-mca, no checked-tail figure, as
entries keep counts, not listings). ``--layers FILE`` (with ``--cache-dir``) adds the
"pick" rows: the same figures over the kernel ``select`` ranks first from that cache for
each layer of FILE (``layers/reference.yaml``) and dtype of ``--dtypes``, each (layer, dtype)'s
pick that runs MMAs counted once; the direct kernels (depthwise, small-C) run
FMAs and are counted apart ("pick direct").

Beside instructions per MMA, "essential instr/MMA" counts only what no loop can drop: its
global loads or async copies, LDS stores and reads, MMAs, barriers and the branch. It
bounds what address and predicate work could ever win: a kernel whose warp tile gives a
wave one or two MMAs per K tile cannot reach 10 instructions per MMA even with none.

``--save`` writes the per-kernel figures as JSON; ``--before FILE`` (an earlier ``--save``)
prints its summary beside this run's, kernel sets matched by label. Nothing here is timed:
the figures are instruction counts, identical from one run to the next for the same sources.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from codegen import spread_specs

from wgradcache.compile.isa import find_loops, main_loop, mma_per_loop, parse_listing
from wgradcache.jobs import walk
from wgradcache.model.spec import KernelSpec, from_label

TARGETS = ("gfx1250", "gfx1201", "gfx1151")
WMMA_CYCLES = 8  # llvm-mca 22's gfx1250 model: v_wmma_f32_16x16x32_* rthroughput 8
MCA_ITERATIONS = 50


def _mca() -> str | None:
    return shutil.which("llvm-mca-22") or next(
        (p for p in ("/usr/lib/llvm-22/bin/llvm-mca",) if os.path.exists(p)), None)


def _wide(spec: KernelSpec) -> bool:
    return (spec.vec_a, spec.vec_b) == (8, 8) or (spec.chunk_a, spec.chunk_b) == (16, 16)


def _loop_text(asm: str) -> str:
    """The main loop's instructions as assembly llvm-mca reads, one per line. Branches are
    dropped (their labels name nothing in the extract), and so are barriers: llvm-mca 22
    gives s_barrier_signal/_wait a latency of 2000 cycles, a wait for other waves that its
    one-wave model cannot place (with them, every loop reads ~2000 cycles per barrier)."""
    code, labels = parse_listing(asm)
    lp = main_loop(code, labels)
    if lp is None:
        return ""
    lines = [f"\t{i.mnemonic} {i.operands}".rstrip() for i in lp.body(code)
             if not i.mnemonic.startswith(("s_branch", "s_cbranch_", "s_barrier"))]
    return "\n".join(lines) + "\n"


def _floor_text(asm: str) -> str:
    """The main loop's global loads (or async copies), all in one group, then its MMAs:
    what llvm-mca's in-order model cannot go below for this loop, however it is scheduled
    (module docstring)."""
    lines = [ln.strip() for ln in _loop_text(asm).splitlines()]
    loads = [ln for ln in lines if ln.startswith(("buffer_load", "global_load"))]
    mmas = [ln for ln in lines if ln.startswith("v_wmma")]
    return "".join(f"\t{ln}\n" for ln in loads + mmas)


def _mca_cycles(mca: str, target: str, text: str) -> float | None:
    with tempfile.NamedTemporaryFile("w", suffix=".s", delete=False) as f:
        f.write(text)
        path = f.name
    try:
        r = subprocess.run([mca, "-mtriple=amdgcn-amd-amdhsa", f"-mcpu={target}",
                            f"-iterations={MCA_ITERATIONS}", path],
                           capture_output=True, text=True, timeout=300)
    finally:
        os.unlink(path)
    m = re.search(r"^Total Cycles:\s+(\d+)", r.stdout, re.M)
    return int(m.group(1)) / MCA_ITERATIONS if m else None


def _tail_instructions(asm: str) -> int | None:
    """Instructions of the checked loop after a steady-state one (the async loop's last one
    or two tiles, ``kloop.async_k_loop``): a later loop with as many MMAs as the main loop;
    None where there is none."""
    code, labels = parse_listing(asm)
    lp = main_loop(code, labels)
    if lp is None:
        return None
    loops = find_loops(code, labels)
    mmas = dict(zip(loops, mma_per_loop(asm), strict=True))  # the same loops, in order
    later = [x for x in loops if x.start > lp.end and mmas[x] == mmas[lp]]
    return max((x.end - x.start for x in later), default=None)


def measure(label: str, want_mca: bool) -> dict:
    """One kernel: emit, compile, main-loop figures (and llvm-mca's cycles when asked)."""
    from wgradcache.compile.codegen import compile_ir
    from wgradcache.model.backends import backend_of
    from wgradcache.wgrad.emit import emit_ir

    spec = from_label(label)
    k = emit_ir(spec)
    obj = compile_ir(k.ir_text, spec.target, listing="disassembly")
    isa = backend_of(spec.target).isa_stats(obj.asm, obj.listing)
    doc = {"label": label, "target": spec.target, "wide": _wide(spec),
           "isa": {key: v for key, v in isa.items() if key.startswith("main_loop_")}}
    tail = _tail_instructions(obj.asm)
    if tail is not None:
        doc["tail_instructions"] = tail
    mca = _mca() if want_mca else None
    if mca:
        doc["mca_cycles"] = _mca_cycles(mca, spec.target, _loop_text(obj.asm))
        doc["mca_floor"] = _mca_cycles(mca, spec.target, _floor_text(obj.asm))
    return doc


def from_cache(root: str, targets: list[str]) -> list[dict]:
    """The per-kernel figures of every entry of a built cache (as ``measure`` gives them,
    without llvm-mca or the tail). A corrupt entry is left out and said on stderr."""
    from wgradcache.cache.entry import CorruptEntry
    from wgradcache.cache.store import TargetCache

    docs = []
    for target in targets:
        for key, entry in TargetCache(root, target).iter_entries():
            if isinstance(entry, CorruptEntry):
                print(f"{target} {key}: {entry}: left out", file=sys.stderr)
                continue
            spec = from_label(entry.label)
            docs.append({"label": entry.label, "target": target, "wide": _wide(spec),
                         "isa": {k: v for k, v in entry.isa.items()
                                 if k.startswith("main_loop_")}})
    return docs


def picks(root: str, docs: list[dict], layers_file: str, dtypes: list[str]) -> list[dict]:
    """The docs of the kernels select ranks first for each layer x dtype, per target of
    ``docs`` (one doc per pick: a kernel picked twice counts twice, as the layers do).
    The cache is read once per target and dtype, as ``select.serve`` reads it per call."""
    from wgradcache.numerics.layers import load_layers
    from wgradcache.pipeline.select import candidates_from_cache, measurements, select

    by_label = {(d["target"], d["label"]): d for d in docs}
    layers = load_layers(layers_file)
    out = []
    for target in dict.fromkeys(d["target"] for d in docs):
        for dtype in dtypes:
            got = candidates_from_cache(root, target, dtype)
            costs = got.costs(measurements(root, target, None, got.blobs))
            for layer in layers:
                ranked = select(target, layer.problem, got.specs, costs=costs)
                if ranked:
                    out.append(by_label[(target, ranked[0].spec.label())])
    return out


def _essential(isa: dict) -> int:
    """The main loop's instructions no address or predicate work can remove."""
    return (isa["main_loop_global_loads"] + isa["main_loop_async_copies"]
            + isa["main_loop_ds_stores"] + isa["main_loop_ds_loads"] + isa["main_loop_mma"]
            + isa["main_loop_barriers"] + 1)


def subset(target: str, count: int) -> list[KernelSpec]:
    specs = list(walk(target))
    picked = spread_specs(specs, count)
    if target == "gfx1250":  # the 128x128 fp16 tiles the mca goal is about
        seen = {s.label() for s in picked}
        picked += [s for s in specs if s.tile_m == s.tile_n == 128 and s.dtype == "fp16"
                   and s.variant.endswith(".default.none")
                   and _wide(s) and s.label() not in seen]
    return picked


def _mmm(xs: list[float]) -> str:
    if not xs:
        return "-"
    return f"{min(xs):6.1f} {statistics.median(xs):6.1f} {max(xs):6.1f}"


def _per(key: str, over: str | None = "main_loop_mma"):
    """A figure of one kernel's isa: ``key`` per ``over`` (None: per iteration)."""
    return lambda isa: isa[key] / (isa[over] if over else 1)


# (row, figure of one kernel's isa, the isa keys it needs): a row is printed for a target
# whose entries all have its keys (sm_90's SASS reader counts no VALU, waits or exec
# branches, so its rows are the instruction, load, LDS, MMA and barrier ones).
_LOADS = ("main_loop_global_loads", "main_loop_async_copies")
FIGURES = (
    ("instr/loop", _per("main_loop_instructions", None), ("main_loop_instructions",)),
    ("MMA/loop", _per("main_loop_mma", None), ()),
    ("loads/loop", lambda i: i[_LOADS[0]] + i[_LOADS[1]], _LOADS),
    ("instr/MMA", _per("main_loop_instructions"), ("main_loop_instructions",)),
    ("essential instr/MMA", lambda i: _essential(i) / i["main_loop_mma"],
     (*_LOADS, "main_loop_ds_stores", "main_loop_ds_loads", "main_loop_barriers")),
    ("loads/MMA", lambda i: (i[_LOADS[0]] + i[_LOADS[1]]) / i["main_loop_mma"], _LOADS),
    ("VALU/MMA", _per("main_loop_valu"), ("main_loop_valu",)),
    ("LDS reads/MMA", _per("main_loop_ds_loads"), ("main_loop_ds_loads",)),
    ("narrow LDS share", lambda i: 100 * i["main_loop_ds_loads_narrow"]
     / max(i["main_loop_ds_loads"], 1), ("main_loop_ds_loads_narrow", "main_loop_ds_loads")),
    ("exec branches/iter", _per("main_loop_exec_branches", None), ("main_loop_exec_branches",)),
    ("barriers/iter", _per("main_loop_barriers", None), ("main_loop_barriers",)),
    ("waits/iter", _per("main_loop_waits", None), ("main_loop_waits",)),
)


def summary(docs: list[dict], picked: list[dict] | None = None) -> dict[str, dict[str, str]]:
    """Per target (the WMMA targets first, then the others in the order met), the rows of
    ``FIGURES`` its kernels have, over all and over the wide-load ones (and over
    ``picked``, select's picks, where given)."""
    out: dict[str, dict[str, str]] = {}
    for target in dict.fromkeys([*TARGETS, *(d["target"] for d in docs)]):
        rows = [d for d in docs if d["target"] == target and d["isa"].get("main_loop_mma")]
        if not rows:
            continue
        t: dict[str, str] = {}
        mine = [d for d in picked or () if d["target"] == target]
        sets = [("all", rows), ("wide", [d for d in rows if d["wide"]])]
        if picked is not None:
            sets.append(("pick", [d for d in mine if d["isa"].get("main_loop_mma")]))
            t["pick direct n"] = str(sum(not d["isa"].get("main_loop_mma") for d in mine))
        for name, sel in sets:
            t[f"{name} n"] = str(len(sel))
            for row, figure, needs in FIGURES:
                if all(k in d["isa"] for d in rows for k in needs):
                    t[f"{name} {row}"] = _mmm([figure(d["isa"]) for d in sel])
        tails = [d["tail_instructions"] / d["isa"]["main_loop_mma"] for d in rows
                 if d.get("tail_instructions")]
        if tails:
            t["checked-tail instr/MMA"] = _mmm(tails)
        mca = [(d["mca_cycles"], WMMA_CYCLES * d["isa"]["main_loop_mma"], d["label"],
                d.get("mca_floor"))
               for d in rows if d.get("mca_cycles") and "-t128x128x" in d["label"]]
        for cyc, bound, label, floor in mca:
            low = f", floor {floor / bound:.2f}x" if floor else ""
            t[f"mca {label}"] = f"{cyc:7.1f} cycles vs {bound} bound ({cyc / bound:.2f}x{low})"
        if mca:
            t["mca x bound (128x128)"] = _mmm([cyc / bound for cyc, bound, _, _ in mca])
            floors = [f / bound for _, bound, _, f in mca if f]
            if floors:
                t["mca floor x bound (128x128)"] = _mmm(floors)
        out[target] = t
    return out


def main(argv: list[str] | None = None) -> int:
    """Print the summary per target; 1 with one line when a cache has nothing to show."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=48, help="kernels per target (spread)")
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--save", help="write per-kernel figures as JSON")
    ap.add_argument("--before", help="an earlier --save to print beside this run")
    ap.add_argument("--cache-dir", help="read every entry of this built cache, compile nothing")
    ap.add_argument("--layers", help="with --cache-dir: also the figures of select's pick "
                    "for each layer of this file")
    ap.add_argument("--dtypes", default="fp16,bf16", help="the dtypes of --layers' picks")
    args = ap.parse_args(argv)
    if args.layers and not args.cache_dir:
        ap.error("--layers needs --cache-dir (select ranks a built cache's entries)")
    targets = args.targets.split(",")
    if args.cache_dir:
        docs = from_cache(args.cache_dir, targets)
        if not docs:
            print(f"{args.cache_dir}: no entries of {args.targets}", file=sys.stderr)
            return 1
        if not any(d["isa"].get("main_loop_mma") for d in docs):
            print(f"{args.cache_dir}: no entry of {args.targets} has a main loop with MMAs "
                  "(entries built before main-loop figures were recorded?)", file=sys.stderr)
            return 1
    else:
        if _mca() is None:
            print("llvm-mca-22 not found (apt-get install -y llvm-22): no cycle estimates",
                  file=sys.stderr)
        jobs = [(s.label(), s.target == "gfx1250" and s.tile_m == s.tile_n == 128)
                for t in targets for s in subset(t, args.count)]
        with ProcessPoolExecutor(args.jobs) as pool:
            docs = list(pool.map(measure, *zip(*jobs, strict=True)))
    if args.save:
        Path(args.save).write_text(json.dumps(docs, indent=1, sort_keys=True))
    picked = picks(args.cache_dir, docs, args.layers, args.dtypes.split(",")) \
        if args.layers else None
    now = summary(docs, picked)
    before = summary(json.loads(Path(args.before).read_text())) if args.before else {}
    for target, rows in now.items():
        print(f"\n{target}  (min median max)")
        old = before.get(target, {})
        keys = list(dict.fromkeys([*rows, *old]))
        width = max(len(k) for k in keys)
        for key in keys:
            cur = rows.get(key, "-")
            prev = f"   before: {old[key]}" if key in old else ""
            print(f"  {key:<{width}}  {cur}{prev}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
