"""Lowering: KernelDef -> LLVM IR text for one AMDGPU target: the AMDGPU backend's pieces
on ``lower_common.Lowering``'s walk (which says why the IR is built as text).

Anything the target cannot do fails here, naming the op, the dtype and the target, before
LLVM can abort the process with ``Cannot select``.

Choices (see ``shared/reference/llvm22-amdgpu-facts.md``):

* ``amdgpu_kernel``, ``"amdgpu-flat-work-group-size"="B,B"`` (B = block size) and
  ``"uniform-work-group-size"="true"`` (HIP launches whole workgroups);
* on the MFMA targets ``"amdgpu-agpr-alloc"="0"``: the MFMAs take and give their
  accumulators in VGPRs. With AGPRs allowed, LLVM 22 held the loop-carried accumulators in
  AGPRs but wrote most MFMAs' results into others and copied them back every iteration
  (gfx942 t128x128x32-w2x2-v8x8: 64 ``v_accvgpr_mov_b32`` a K tile for 32 MFMAs, 210
  main-loop instructions and 200 registers; without AGPRs 147 and 122). Past 256 VGPRs
  (the 128-accumulator tiles) LLVM still spills into AGPRs, without scratch;
* one ``addrspace(3)`` global per LDS allocation, sized exactly, undef, align 16: the code
  object's LDS is the sum of the allocations;
* pointer arguments ``noalias`` (when the KernelArg says so), ``nonnull`` (the launcher never
  passes null) and ``align`` (the KernelArg's base alignment); every argument ``noundef``
  (the launcher passes each one defined; ``lower_common.Lowering.define_kernel`` says what
  it saves);
* atomics: ``atomicrmw fadd ... syncscope("agent") monotonic`` with
  ``!amdgpu.no.fine.grained.memory !{}`` (native f32 atomic on gfx1151), never the legacy
  ``llvm.amdgcn.global.atomic.fadd`` (auto-upgraded to seq_cst + cache maintenance);
* barrier: workgroup release fence, ``llvm.amdgcn.s.barrier``, workgroup acquire fence (the
  fences make LDS stores visible across waves, as HIP's ``__syncthreads``);
* predicated memory ops become a branch (a load merges 0 with a phi), so a predicated-off
  lane issues nothing;
* a bounded load is ``llvm.amdgcn.raw.ptr.buffer.load`` through one buffer resource per
  (pointer argument, size argument), made in the entry block with
  ``llvm.amdgcn.make.buffer.rsrc`` (stride 0, num_records = the size, word 3 from
  ``Target.buffer_rsrc_word3``): the range check is the hardware's, so no branch; the
  value is loaded as i8/i16/i32/<N x i32> and bitcast to the IR type. A load whose record
  moves (a start operand, or a computed size) makes its resource where it loads, from
  ``p + start``; its operands are workgroup-uniform, so the resource stays in SGPRs and
  LLVM's CSE and LICM share one among the loads of a tile;
* a wave-uniform ``if`` (``IfRegion.uniform``) branches on ``llvm.amdgcn.readfirstlane`` of
  the predicate: a scalar branch, no exec-mask save/restore;
* the module flag ``!{i32 1, !"amdhsa_code_object_version", i32 500}`` of
  ``model.targets.CODE_OBJECT_VERSION`` (5), the version the codegen options accept.

The same KernelDef always gives byte-identical text (names come from value ids).
"""


from __future__ import annotations

from wgradcache.kernel import mma
from wgradcache.kernel.ir import DType, KernelDef, Ops, Value, walk
from wgradcache.kernel.lower_common import (
    Lowering,
    LoweringError,
    LValue,
    hw_uses,
    int_text,
    ltype,
    mangle,
    moving_record,
)
from wgradcache.model.targets import CODE_OBJECT_VERSION, code_object_version_flag

__all__ = ["AmdgpuLowering", "LoweringError", "lower", "DATA_LAYOUT", "TRIPLE"]

TRIPLE = "amdgcn-amd-amdhsa"

# LLVM 22's AMDGPU data layout (identical for every gfx target; a test compares it with the
# target machine's): p3 is 32-bit, so LDS geps index with 32-bit offsets.
DATA_LAYOUT = ("e-m:e-p:64:64-p1:64:64-p2:32:32-p3:32:32-p4:64:64-p5:32:32-p6:32:32-"
               "p7:160:256:256:32-p8:128:128:128:48-p9:192:256:256:32-i64:64-v16:16-v24:32-"
               "v32:32-v48:64-v96:128-v192:256-v256:256-v512:512-v1024:1024-v2048:2048-"
               "n32:64-S32-A5-G1-ni:7:8:9")

_ASYNC_COPY = {4: "llvm.amdgcn.global.load.async.to.lds.b32",
               8: "llvm.amdgcn.global.load.async.to.lds.b64",
               16: "llvm.amdgcn.global.load.async.to.lds.b128"}

# a bounded load's LLVM type per byte count (buffer_load_u8 .. _b128) and its mangling
_BUFFER_TYPES = {1: ("i8", "i8"), 2: ("i16", "i16"), 4: ("i32", "i32"),
                 8: ("<2 x i32>", "v2i32"), 12: ("<3 x i32>", "v3i32"),
                 16: ("<4 x i32>", "v4i32")}

_NOFINE = ", !amdgpu.no.fine.grained.memory !0"  # !0 is always the empty node

_MODULE_FLAGS = ["!llvm.module.flags = !{ !1 }", "!0 = !{  }",
                 '!1 = !{ i32 1, !"amdhsa_code_object_version", '
                 f"i32 {code_object_version_flag(CODE_OBJECT_VERSION)} }}"]

def lower(kd: KernelDef, target: str) -> str:
    """LLVM IR text of ``kd`` for the AMDGPU ``target`` (e.g. "gfx1250"); deterministic.
    ``kernel.lower.lower`` takes any target (through its backend)."""
    return AmdgpuLowering(kd, target).text()


class AmdgpuLowering(Lowering):
    triple = TRIPLE
    datalayout = DATA_LAYOUT
    module_tail = _MODULE_FLAGS

    def kernel_prototype(self, ref: str, params: str) -> str:
        b = self.kd.block_size
        agprs = '"amdgpu-agpr-alloc"="0" ' if self.target.family == "mfma" else ""
        return (f'define amdgpu_kernel void {ref}({params}) {agprs}'
                f'"amdgpu-flat-work-group-size"="{b},{b}" "uniform-work-group-size"="true"')

    def atomic_add(self, v: Value, name: str) -> None:
        (pt, p), (xt, x) = self.val(v.src[0]), self.val(v.src[1])
        return self.predicated(v, 2, lambda: self.void(
            f'atomicrmw fadd {pt} {p}, {xt} {x} syncscope("agent") monotonic, align 4'
            + _NOFINE))

    def async_copy(self, v: Value, name: str) -> None:
        if v.op is Ops.ASYNC_COPY_ZFILL:
            self.fail(v, "no zero-filling async copy on this target (NVIDIA cp.async; gfx1250 "
                         "copies with a zero store beside: copies.copy_or_zero_fill)")
        self.need_async(v)
        p, d = self.val(v.src[0]), self.val(v.src[1])
        f = self.intrinsic(_ASYNC_COPY[v.arg], "void",
                           ["ptr addrspace(1)", "ptr addrspace(3)", "i32", "i32"])
        # offset 0 (applies to both addresses), cpol 0 (default cache policy)
        return self.predicated(v, 2, lambda: self.call(f, [p, d, ("i32", "0"), ("i32", "0")]))


    def hw_ids(self):
        """Materialise the hardware ids the kernel uses, once, in the entry block."""
        seen: dict[tuple, Value] = {}
        hw_uses(self.kd.body, seen)
        for key in sorted(seen, key=lambda k: (k[0], -1 if k[1] is None else k[1])):
            s = seen[key]
            if s.op is Ops.THREAD_ID:
                name = "llvm.amdgcn.workitem.id.x"
            else:
                name = f"llvm.amdgcn.workgroup.id.{'xyz'[s.arg]}"
            self.values[s.id] = self.call(self.intrinsic(name, "i32", []), [], f"v{s.id}")

    def buffer_resources(self):
        """One buffer resource per (pointer, size) argument pair of the bounded loads, in the
        entry block (arguments dominate everything; the resource lives in SGPRs)."""
        self.rsrc: dict[tuple[int, int], LValue] = {}
        for v in walk(self.kd.body):
            if v.op is not Ops.BOUNDED_LOAD or moving_record(v):
                continue
            key = (v.src[0].id, v.src[2].id)
            if key in self.rsrc:
                continue
            word3 = self.target.buffer_rsrc_word3
            if not word3:
                self.fail(v, "no buffer resource on this target (Target.buffer_rsrc_word3)")
            name = f"rsrc.{key[0]}.{key[1]}"
            n = self.cast("zext", self.val(v.src[2]), "i64", name + ".n")
            f = self.intrinsic("llvm.amdgcn.make.buffer.rsrc.p8.p1", "ptr addrspace(8)",
                               ["ptr addrspace(1)", "i16", "i64", "i32"])
            self.rsrc[key] = self.call(f, [self.val(v.src[0]), ("i16", "0"), n,
                                           ("i32", str(word3))], name)

    def async_wait(self, v: Value, name: str) -> None:
        self.need_async(v)
        f = self.intrinsic("llvm.amdgcn.s.wait.asynccnt", "void", ["i16"])
        self.call(f, [("i16", int_text(v.arg))])

    def barrier(self, v: Value, name: str) -> None:
        self.void('fence syncscope("workgroup") release')
        self.call(self.intrinsic("llvm.amdgcn.s.barrier", "void", []), [])
        self.void('fence syncscope("workgroup") acquire')

    def lds_load_tr(self, v: Value, name: str) -> LValue:
        if v.arg != "ds_load_tr16_b128" or self.target.lds_read_tr != v.arg:
            self.fail(v, f"no {v.arg} on this target (its transposing read: "
                         f"{self.target.lds_read_tr or 'none'})")
        ty = ltype(v.dtype)
        f = self.intrinsic(f"llvm.amdgcn.ds.load.tr16.b128.{mangle(v.dtype)}", ty,
                           ["ptr addrspace(3)"])
        return self.call(f, [self.val(v.src[0])], name)

    def moving_rsrc(self, v: Value, name: str) -> LValue:
        """The buffer resource of a record at ``p + start`` of ``num_bytes``, made here."""
        word3 = self.target.buffer_rsrc_word3
        if not word3:
            self.fail(v, "no buffer resource on this target (Target.buffer_rsrc_word3)")
        base = self.val(v.src[0])
        if len(v.src) == 4:
            start = self.cast("zext", self.val(v.src[3]), "i64", name + ".start")
            base = self.emit(name + ".base", "ptr addrspace(1)",
                             f"getelementptr i8, ptr addrspace(1) {base[1]}, i64 {start[1]}")
        n = self.cast("zext", self.val(v.src[2]), "i64", name + ".n")
        f = self.intrinsic("llvm.amdgcn.make.buffer.rsrc.p8.p1", "ptr addrspace(8)",
                           ["ptr addrspace(1)", "i16", "i64", "i32"])
        return self.call(f, [base, ("i16", "0"), n, ("i32", str(word3))], name + ".rsrc")

    def bounded_load(self, v: Value, name: str) -> LValue:
        rsrc = self.moving_rsrc(v, name) if moving_record(v) else \
            self.rsrc[(v.src[0].id, v.src[2].id)]
        ty, mangle = _BUFFER_TYPES[v.dtype.nbytes]
        f = self.intrinsic(f"llvm.amdgcn.raw.ptr.buffer.load.{mangle}", ty,
                           ["ptr addrspace(8)", "i32", "i32", "i32"])
        # voffset (in the range check), soffset 0, aux 0 (default cache policy)
        raw = self.call(f, [rsrc, self.val(v.src[1]), ("i32", "0"), ("i32", "0")],
                        name + ".raw")
        return self.cast("bitcast", raw, ltype(v.dtype), name)

    def async_commit(self, v: Value, name: str) -> None:
        self.fail(v, "cp.async groups are NVIDIA's: gfx1250 waits for a count of its copies "
                     "(ASYNC_WAIT)")

    async_wait_group = async_commit

    def need_async(self, v: Value):
        if not self.target.async_lds_copy:
            self.fail(v, "no async global->LDS copies on this target (gfx1250 only)")

    # -- matrix ----------------------------------------------------------------------------
    def mma(self, v: Value, name: str) -> LValue:
        form = v.arg
        if form not in self.forms:
            self.fail(v, f"MMA form {form!r} does not exist here (target has "
                         f"{', '.join(sorted(self.forms))})")
        ab = v.src[0].dtype
        try:
            intr = mma.intrinsic(form, ab.scalar)
        except KeyError as e:
            self.fail(v, e.args[0])
        op_dt = DType(intr.operand, ab.count)
        a, bb, c = (self.val(s) for s in v.src)
        at = ltype(op_dt)
        if op_dt != ab:  # bf16 as integer vectors on gfx11/gfx12/mfma
            a = self.cast("bitcast", a, at, name + ".a")
            bb = self.cast("bitcast", bb, at, name + ".b")
        args = intr.args(a, bb, c)
        f = self.intrinsic(intr.name, ltype(v.dtype), [t for t, _ in args])
        return self.call(f, args, name)

    def uniform_predicate(self, pred: LValue, r) -> LValue:
        """One lane's predicate: a scalar branch (the emulator checks it is uniform)."""
        z = self.cast("zext", pred, "i32", f"if{r.id}.z")
        f = self.intrinsic("llvm.amdgcn.readfirstlane.i32", "i32", ["i32"])
        u = self.call(f, [z], f"if{r.id}.u")
        return self.emit(f"if{r.id}.c", "i1", f"icmp ne i32 {u[1]}, 0")
