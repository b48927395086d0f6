"""A small sm_90 cache with one planted off-by-one kernel, for the device run to catch.

Run here (CPU, the build's libLLVM-22 and ptxas), from the repo root with ``PYTHONPATH=src``:

    python3 benchmarks/device_plant.py --out devcache/planted

It builds the fp16 and bf16 kernels of one geometry and variant (default
``t64x64x32-w2x2``, ``sync.default.none``) into ``OUT/cache``, then replaces the fp16
kernel's blob with the cubin of the same spec whose reduction stops one element short of
``wg_K`` (``k_end = min(k_begin + ks, wg_K - 1)``: the last reduction element of the last
slice is dropped). Its entry is rewritten with the planted binary's size, sha256 and figures,
so integrity and structure hold; only running it shows the bug. Reproduce would catch it
too, which is why the device run (``--no-reproduce``: no libLLVM-22 there) is what must
catch it here: ``verify --device cuda --level numerics`` has to fail exactly the planted
entry and pass the bf16 one. The label of the planted entry is written to
``OUT/planted.txt``.
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = "sm_90"


def planted_kernel(spec):
    """``spec``'s kernel with the off-by-one reduction bound (everything else its own)."""
    from wgradcache.wgrad.context import open_wgrad_kernel
    from wgradcache.wgrad.epilogue import cshuffle_epilogue, default_epilogue
    from wgradcache.wgrad.kernel import kernel_symbol
    from wgradcache.wgrad.kloop import async_k_loop, sync_k_loop

    ctx = open_wgrad_kernel(spec, kernel_symbol(spec))
    kb = ctx.kb
    short = kb.sub(ctx.a["wg_K"], 1)
    ctx = dataclasses.replace(ctx, k_end=kb.smin(kb.add(ctx.k_begin, ctx.a["ks"]), short))
    accs = async_k_loop(ctx) if spec.k_loop == "async" else sync_k_loop(ctx)
    (cshuffle_epilogue if spec.epilogue == "cshuffle" else default_epilogue)(ctx, accs)
    return kb.finish()


def plant(cache, entry) -> bytes:
    """Compile the planted kernel under the entry's symbol; rewrite blob and entry."""
    from wgradcache.cache.store import sha256_bytes
    from wgradcache.compile.isolate import compile_isolated
    from wgradcache.kernel.lower import lower
    from wgradcache.model.spec import KernelSpec
    from wgradcache.pipeline.workers import metadata

    spec = KernelSpec.from_dict(entry.identity)
    out = compile_isolated(lower(planted_kernel(spec), TARGET), TARGET, timeout=300)
    if not out.ok:
        raise SystemExit(f"device_plant: the planted kernel did not compile: {out.error}")
    meta, data = metadata(out.obj, TARGET, spec), out.obj.hsaco
    cache.write_blob(entry.blob, data, meta)
    cache.write_entry(dataclasses.replace(
        entry, blob_size=len(data), blob_sha256=sha256_bytes(data),
        code_object=meta.code_object, isa=meta.isa))
    return data


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="devcache/planted")
    ap.add_argument("--geometry", default="t64x64x32-w2x2")
    ap.add_argument("--variant", default="sync.default.none")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    from wgradcache.cache.store import TargetCache

    cache_dir = Path(a.out) / "cache"
    cmd = [sys.executable, "-m", "wgradcache", "build", "--target", TARGET, "--jobs", "2",
           "--cache-dir", str(cache_dir), "--geometry", a.geometry, "--variant", a.variant,
           "--dtype", "fp16", "--dtype", "bf16"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    cache = TargetCache(cache_dir, TARGET)
    entries = [cache.read_entry(k) for k in cache.entry_keys()]
    victim = min((e for e in entries if e.dtype == "fp16"), key=lambda e: e.label)
    plant(cache, victim)
    (Path(a.out) / "planted.txt").write_text(victim.label + "\n")
    print(f"planted the off-by-one in {victim.label}; {len(entries)} entries in {cache_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
