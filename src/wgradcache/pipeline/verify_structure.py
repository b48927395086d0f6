"""``verify``'s structure level: what a stored code object is, derived from its bytes alone.

An entry records its kernel's symbol, code-object metadata (registers, LDS, arguments) and
ISA statistics, but a cache is input: a blob replaced by another kernel's bytes with the
entry's size and sha256 fixed, or an entry re-pointed at another valid blob, passes every
file check. So nothing here is read from the entry but to be compared. From the stored
bytes: the backend's reading of it (``read_code_object``: the ELF and its metadata note, or
a cubin's attributes), and the ISA statistics of a
disassembly of the stored binary (``disasm.list_binary``: the in-process disassembler the
build lists with, else ``llvm-objdump``; ``isa_stats`` of either equals what the build
recorded from the relocatable object, tested). Then:

* the binary against the spec: the target's mach and wave size, the kernel symbol is the
  spec's kernel name (or, for a blob two identities share, the name of a walked spec whose
  IR differs from this one's only in that name), a kernel descriptor, the explicit kernel
  arguments laid out as the ABI's, a flat workgroup size that admits the block, LDS equal
  to what the generator allocates and within the target, no spills, no scratch, and the
  ISA the variant requires on its target (``isa_problems`` on the derived statistics: the
  family's matrix instruction only, a whole number of K tiles of them, native atomics
  without fences or a compare-and-swap loop);
* the entry against the binary (the AGPR count of the MFMA targets' accumulators among
  them): its ``symbol``, every ``code_object`` field (the binary's record with the
  kernel's ABI names and dynamic shared bytes, ``wgrad.abi.record_facts``) and every
  ``isa`` figure it records must be the binary's (a figure the entry does not record, from
  a version before the figure existed, is not compared; one it records must match).

A stage-2 companion gets the same checks against its own kernel (name, ABI, no LDS budget
of a tile). Without any disassembler the ISA statistics cannot be derived from the
binaries: that is one failure per target, not a pass on the entries' word.

Cost: ~6 ms per entry for the disassembly and ~2 ms for the ELF (a full gfx1250 cache of
~3100 entries: ~25 s on one core), against ~0.2 s per entry for reproduce.
"""

from __future__ import annotations

from collections.abc import Callable

from wgradcache.model.backends import backend_of
from wgradcache.model.spec import (
    KernelSpec,
    direct_kind,
    dynamic_lds_bytes,
    is_direct,
    lds_bytes,
    ring_wait_depth,
    spec_sync_k_outer,
    sync_stages,
)
from wgradcache.model.targets import get_target

__all__ = ["ATOMIC_FENCES", "isa_problems", "binary_facts", "record_differences",
           "entry_problems", "stage2_problems", "disassembler_missing"]

ATOMIC_FENCES = ("global_wb", "global_inv", "global_wbinv", "buffer_wbl2", "buffer_inv",
                 "buffer_gl1_inv", "buffer_wbinvl1", "buffer_wbinvl1_vol")
_SHOWN_DIFFERENCES = 3  # record fields named per failure line; the rest are counted


def isa_problems(spec: KernelSpec, isa: dict) -> list[str]:
    """What the variant's ISA must (not) contain; empty when it is as required.

    ``isa`` is ``compile.isa.isa_stats`` of the kernel's listing (structure passes the
    statistics of the stored binary's disassembly, never the entry's record).
    """
    out: list[str] = []

    def need(cond: bool, text: str) -> None:
        if not cond:
            out.append(text)

    f32 = isa.get("global_atomic_add_f32", 0)
    pk = {"fp16": isa.get("global_atomic_pk_add_f16", 0),
          "bf16": isa.get("global_atomic_pk_add_bf16", 0)}
    (_direct_loop if is_direct(spec) else _gemm_loop)(spec, isa, need)
    # both loops predicate without branches: bounded loads (sync), selected copy and
    # zero-fill slots (async)
    need(isa.get("main_loop_exec_branches", 0) == 0 and isa.get("main_loop_saveexec", 0)
         == 0, f"{spec.k_loop} loop branches on the exec mask (predicated loads, copies or "
               "stores)")
    if spec.reduction == "atomic":
        if spec.dw_dtype == "fp32":
            need(f32 > 0, "fp32 split-K without global_atomic_add_f32")
        else:
            need(pk[spec.dw_dtype] > 0,
                 f"16-bit split-K without global_atomic_pk_add_{spec.dw_dtype.replace('fp', 'f')}")
    elif spec.reduction == "two_stage":
        need(f32 > 0, "two-stage stage 1 without f32 workspace atomics")
    else:
        need(isa.get("global_atomics", 0) == 0, "an unsplit kernel issues atomics")
    if spec.reduction != "none":
        # Device-scope cache maintenance marks a fenced (seq_cst) atomic; the workgroup
        # fences of LDS barriers (gfx12 global_inv SCOPE_SE, gfx11 buffer_gl0_inv) do not.
        fences = (isa["device_cache_ops"] if "device_cache_ops" in isa
                  else sum(isa.get(k, 0) for k in ATOMIC_FENCES))  # entries before the key
        need(fences == 0, f"split-K atomics with {fences} device-scope fence/cache "
                          "instruction(s)")
        need(isa.get("cas_loops", 0) == 0, "split-K atomics lowered to a compare-and-swap loop")
    return out


def _gemm_loop(spec: KernelSpec, isa: dict, need: Callable[[bool, str], None]) -> None:
    """The GEMM kernels' main loop: the target's MMA, whole K tiles of atoms, the barriers
    and the loads of the spec's widths per K step."""
    target = get_target(spec.target)
    need(isa.get("mma", 0) > 0, "no MMA instruction")
    # the target family's matrix instruction and no other (v_mfma on gfx942 / gfx950)
    own, other = ("mfma", "wmma") if target.family == "mfma" else ("wmma", "mfma")
    if own in isa:
        need(isa[own] == isa.get("mma", 0) and isa.get(other, 0) == 0,
             f"{isa.get(own, 0)} v_{own} of {isa.get('mma', 0)} MMAs on a {own} target")
    # every K tile issues the same atoms: atoms per wave x k-steps per tile_k
    atom = target.atom(spec.dtype)
    if atom is not None:
        per_tile = ((spec.tile_m // spec.warp_m // atom.m)
                    * (spec.tile_n // spec.warp_n // atom.n) * (spec.tile_k // atom.k))
        need(per_tile > 0 and isa.get("mma", 0) % per_tile == 0,
             f"{isa.get('mma', 0)} MMAs is not a whole number of K tiles of {per_tile}")
    # One barrier per K step in both loops (the sync loop over two LDS stages; two barriers
    # where only one stage fits, spec.sync_stages; the async loop at every ring depth);
    # LLVM drops s_barrier when the block is one wave (flat-work-group-size <= wave);
    # ptxas keeps a one-warp block's bar.sync.
    per_step = 1 if spec.k_loop == "async" or sync_stages(
        spec.tile, spec_sync_k_outer(spec)) == 2 else 2
    want = (per_step if spec.block_size > target.wave_size
            or not backend_of(target.name).one_wave_barrier else 0)
    got = isa.get("main_loop_barriers", 0)
    need(got == want, f"{spec.k_loop} loop takes {got} barriers per K step, not {want}")
    # Each thread issues the spec's loads per K tile, one K tile per iteration: the vector
    # (sync) or chunk (async) widths show in the bytes, so a blob of the same tile with
    # other widths, renamed to this kernel, is refused without compiling it again. Each
    # operand's vectors over the block, rounded up per operand (``slots.tile_slots``: a
    # partial last slot is a predicated load of its own): the total rounded up once missed
    # wave64's 32x32 w2x2 v8x8, half a vector of A and of B a thread, two loads.
    key, what = (("main_loop_global_loads", "global loads") if spec.k_loop == "sync"
                 else ("main_loop_async_copies", "async copies"))
    loads = _loads_per_step(spec)
    need(isa.get(key, 0) == loads, f"{isa.get(key, 0)} {what} per K step, the spec's "
                                   f"widths make {loads}")
    if spec.k_loop == "async":
        need(isa.get("async_copies", 0) > 0, "async loop without global_load_async_to_lds")
        need(isa.get("async_waits", 0) > 0, "async loop without s_wait_asynccnt")
        # the ring's depth: the steady wait leaves the newer S - 2 tiles' copies in flight
        # (0 for the ping-pong: a wait for all), so a kernel of another ring, or one whose
        # waits codegen merged into a wait for all, is refused
        depth = ring_wait_depth(spec)
        got_depth = isa.get("main_loop_async_wait_depth", 0)
        need(got_depth == depth, f"the async loop's wait leaves {got_depth} in flight, its "
                                 f"ring of {spec.stages} stages {depth}")
    else:
        need(isa.get("async_copies", 0) == 0, "sync loop issues async copies")


def _loads_per_step(spec: KernelSpec) -> int:
    """Global loads (sync) or async copies each thread issues per K tile, as the slots
    lay them out: per operand, its tile's vectors over the block, rounded up."""
    va, vb = spec.load_widths.elements(spec.dtype)
    block = spec.block_size
    return sum(-(-spec.tile_k * tile // vec // block)
               for tile, vec in ((spec.tile_m, va), (spec.tile_n, vb)))


def _direct_loop(spec: KernelSpec, isa: dict, need: Callable[[bool, str], None]) -> None:
    """A direct kernel's main loop (``wgrad/direct.py``): no MMA, no async copy, no
    barrier (its one barrier follows the loop), and per step each thread's loads: its dY
    vector and, per compiled tap, one X vector (depthwise) or the pixel's Cc = vec_b
    channels as scalars (small-C); a depthwise run of R output columns (``wo_run``) R dY
    vectors and T x (T + R - 1) X vectors, each pixel of a tap row once."""
    dk = direct_kind(spec)
    kind, per_tap = dk.name, dk.per_tap
    need(isa.get("mma", 0) == 0, f"{isa.get('mma', 0)} MMA instructions in a {kind} kernel")
    need(isa.get("async_copies", 0) == 0, f"the {kind} loop issues async copies")
    got = isa.get("main_loop_barriers", 0)
    need(got == 0, f"{kind} loop takes {got} barriers per step, not 0")
    run = spec.wo_run
    loads = run + spec.tile_m * (spec.tile_m + run - 1) * per_tap
    have = isa.get("main_loop_global_loads", 0)
    taps = f"{spec.tile_m}x{spec.tile_m} taps" + ("" if per_tap == 1 else f" of {per_tap} "
                                                                          "channels")
    taps += "" if run == 1 else f" over runs of {run} columns"
    need(have == loads, f"{have} global loads per {kind} step, its {taps} make {loads}")


def disassembler_missing(target: str) -> str:
    """Why no stored binary of ``target`` can be disassembled here, or "" when one can
    (sm_90: nvdisasm; the AMD targets: libLLVM's disassembler or llvm-objdump)."""
    return backend_of(target).disassembler_missing()


def binary_facts(data: bytes, target: str):
    """(``CodeObjectInfo``, ISA statistics) of a stored code object, from its bytes;
    ValueError with the reason for bytes that are not a code object or do not
    disassemble."""
    backend = backend_of(target)
    co = backend.read_code_object(data)
    return co, backend.isa_stats(backend.stored_listing(data, target))


def _shown(v: object) -> str:
    text = repr(v) if isinstance(v, str) else str(v)
    return text if len(text) <= 70 else text[:67] + "..."


def record_differences(entry, co, stats: dict, facts) -> list[str]:
    """``field: entry records X, the binary Y`` for each field the entry (or stage-2
    companion) records that is not what the binary holds (its record with the kernel's
    ``wgrad.abi.RecordFacts``), the first ``_SHOWN_DIFFERENCES`` named and the rest counted."""
    symbol, code_object, isa = entry.symbol, entry.code_object, entry.isa
    diffs = []
    if symbol != co.symbol:
        diffs.append(f"symbol: entry records {_shown(symbol)}, the binary {_shown(co.symbol)}")
    derived = co.record(facts)
    for name in sorted(derived):
        if code_object.get(name) != derived[name]:
            if name == "args":
                diffs.append("code_object.args: entry records other kernel arguments than "
                             "the binary's")
            else:
                diffs.append(f"code_object.{name}: entry records "
                             f"{_shown(code_object.get(name))}, the binary "
                             f"{_shown(derived[name])}")
    for name in sorted(isa):
        if stats.get(name) != isa[name]:
            got = stats[name] if name in stats else "has none"
            diffs.append(f"isa.{name}: entry records {isa[name]}, the binary {got}")
    if len(diffs) > _SHOWN_DIFFERENCES:
        rest = len(diffs) - _SHOWN_DIFFERENCES
        diffs = [*diffs[:_SHOWN_DIFFERENCES], f"{rest} more recorded field(s) differ"]
    return diffs


def _abi_problems(co, args, block: int, target: str) -> list[str]:
    from wgradcache.wgrad.abi import binary_layout

    out = []
    have = tuple((a.name, a.offset, a.size) for a in co.explicit_args)
    want = binary_layout(args, target)
    if have != want:
        first = next((f"{w} vs {h}" for w, h in zip(want, have, strict=False) if w != h),
                     "count")
        out.append(f"kernel arguments are not the ABI's ({len(have)} explicit, the ABI has "
                   f"{len(want)}; first difference: {_shown(first)})")
    if co.max_threads < block:
        out.append(f"{co.THREADS_WORD} {co.max_threads} < block {block}")
    return out


def _common_problems(co, target: str) -> list[str]:
    t = get_target(target)
    out = []
    if co.mach != t.e_mach:
        out.append(f"mach 0x{co.mach:x}, expected 0x{t.e_mach:x}")
    if co.wave_size != t.wave_size:
        out.append(f"wavefront size {co.wave_size}, the target's is {t.wave_size}")
    if not co.loads_as_kernel:
        out.append("kernel symbol or descriptor missing")
    if co.static_lds_bytes > t.lds_bytes:
        out.append(f"{co.SHARED_WORD} {co.static_lds_bytes} B exceeds the target's")
    if co.spills:
        out.append(f"spills: {co.spills}")
    if co.stack_bytes:
        out.append(f"{co.STACK_WORD} {co.stack_bytes} B")
    return out


def _symbol_problems(spec: KernelSpec, found: str,
                     walked_symbol: Callable[[str], KernelSpec | None]) -> list[str]:
    """The binary's kernel name must be this spec's; a blob shared with another identity
    holds that identity's name, accepted only when the two IRs differ in nothing else."""
    from wgradcache.cache.store import blank_symbol
    from wgradcache.wgrad.emit import emit_ir
    from wgradcache.wgrad.kernel import kernel_symbol

    want = kernel_symbol(spec)
    if found == want:
        return []
    other = walked_symbol(found)
    if other is None:
        return [f"kernel symbol {_shown(found)} is not this kernel's ({want})"]
    mine, theirs = emit_ir(spec, check=False), emit_ir(other, check=False)
    if blank_symbol(mine.ir_text, mine.symbol) != blank_symbol(theirs.ir_text, theirs.symbol):
        return [f"kernel symbol {found} is {other.label()}'s, a kernel whose IR is not this "
                "one's"]
    return []


def entry_problems(spec: KernelSpec, entry, data: bytes,
                   walked_symbol: Callable[[str], KernelSpec | None]) -> list[str]:
    """Every structure finding of one entry and its stored bytes (empty: it passed).
    ``walked_symbol``: the walked spec whose kernel has a name, or None."""
    from wgradcache.wgrad.abi import WGRAD_ARGS, record_facts

    try:
        co, stats = binary_facts(data, spec.target)
    except ValueError as e:
        return [f"not a code object: {e}"]
    problems = _common_problems(co, spec.target)
    problems += _symbol_problems(spec, co.symbol, walked_symbol)
    problems += _abi_problems(co, WGRAD_ARGS, spec.block_size, spec.target)
    if co.max_threads > spec.block_size:  # the build sets it to the block
        problems.append(f"{co.THREADS_WORD} {co.max_threads} > block "
                        f"{spec.block_size}: another kernel's")
    dynamic = dynamic_lds_bytes(spec)  # an extern array: no static bytes in the binary
    if co.static_lds_bytes != lds_bytes(spec) - dynamic:
        problems.append(f"{co.SHARED_WORD} {co.static_lds_bytes} B static, generator "
                        f"allocates {lds_bytes(spec)} B" + (
                            f" (dynamic: {dynamic} B at launch)" if dynamic else ""))
    problems += record_differences(entry, co, stats, record_facts(spec))
    return problems + isa_problems(spec, stats)


def stage2_problems(entry, data: bytes, target: str) -> list[str]:
    """``entry_problems`` of a stage-2 companion: its own kernel name and ABI."""
    from wgradcache.wgrad.abi import STAGE2_ARGS, STAGE2_BLOCK, record_facts
    from wgradcache.wgrad.stage2 import stage2_symbol

    try:
        co, stats = binary_facts(data, target)
    except ValueError as e:
        return [f"not a code object: {e}"]
    problems = _common_problems(co, target)
    want = stage2_symbol(entry.dw_dtype, entry.ws_replicas)
    if co.symbol != want:
        problems.append(f"kernel symbol {_shown(co.symbol)} is not this kernel's ({want})")
    problems += _abi_problems(co, STAGE2_ARGS, STAGE2_BLOCK, target)
    return problems + record_differences(entry, co, stats, record_facts(None))
