"""Lowering: KernelDef -> LLVM IR text for one AMDGPU target, through ``llvmlite.ir``.

Layout after tinygrad's LLVM renderer: per-op tables (``_INT_BINOPS``, ``_ICMP``, ...), the
per-target differences as data (``_MMA_INTRINSICS``), and one ``_Lowering`` that walks the
structured regions 1:1 (a FOR becomes a header with phis + ``add_incoming``, an IF becomes
``if_then`` / ``if_else`` + phis). Opaque pointers carry their address space; addresses are
``gep``s, never integer casts. Anything the target cannot do fails here, naming the op, the
dtype and the target, before LLVM can abort the process with ``Cannot select``.

Choices (see ``shared/reference/llvm22-amdgpu-facts.md``):

* ``amdgpu_kernel``, ``"amdgpu-flat-work-group-size"="B,B"`` (B = block size) and
  ``"uniform-work-group-size"="true"`` (HIP launches whole workgroups);
* one ``addrspace(3)`` global per LDS allocation, sized exactly, undef, align 16: the code
  object's LDS is the sum of the allocations;
* pointer arguments ``noalias`` (when the KernelArg says so), ``nonnull`` (the launcher never
  passes null) and ``align`` (the KernelArg's base alignment);
* atomics: ``atomicrmw fadd ... syncscope("agent") monotonic`` with
  ``!amdgpu.no.fine.grained.memory !{}`` (native f32 atomic on gfx1151), never the legacy
  ``llvm.amdgcn.global.atomic.fadd`` (auto-upgraded to seq_cst + cache maintenance);
* barrier: workgroup release fence, ``llvm.amdgcn.s.barrier``, workgroup acquire fence (the
  fences make LDS stores visible across waves, as HIP's ``__syncthreads``);
* predicated memory ops become a branch (a load merges 0 with a phi), so a predicated-off
  lane issues nothing;
* code object v5 module flag ``!{i32 1, !"amdhsa_code_object_version", i32 500}``.

The same KernelDef always gives byte-identical text (names come from value ids).
"""

from __future__ import annotations

import llvmlite.ir as ll
from llvmlite.ir import instructions as ll_instr
from llvmlite.ir import types as ll_types

from ..targets import get_target
from .builder import _f32_to_bf16_bits
from .ir import DType, GroupOp, KernelDef, Ops, Value, bf16, f16, f32

__all__ = ["LoweringError", "lower", "DATA_LAYOUT", "TRIPLE"]

TRIPLE = "amdgcn-amd-amdhsa"
# LLVM 22's AMDGPU data layout (identical for every gfx target; a test compares it with the
# target machine's): p3 is 32-bit, so LDS geps index with 32-bit offsets.
DATA_LAYOUT = ("e-m:e-p:64:64-p1:64:64-p2:32:32-p3:32:32-p4:64:64-p5:32:32-p6:32:32-"
               "p7:160:256:256:32-p8:128:128:128:48-p9:192:256:256:32-i64:64-v16:16-v24:32-"
               "v32:32-v48:64-v96:128-v192:256-v256:256-v512:512-v1024:1024-v2048:2048-"
               "n32:64-S32-A5-G1-ni:7:8:9")


class LoweringError(ValueError):
    """The kernel uses something the target (or this lowering) does not support."""


class BFloatType(ll_types._BaseFloatType):
    """LLVM ``bfloat`` (llvmlite has none); constants print as ``0xRXXXX``."""

    null = "0.0"
    intrinsic_name = "bf16"

    def __str__(self) -> str:
        return "bfloat"

    def format_constant(self, value) -> str:
        return f"0xR{int(_f32_to_bf16_bits(value)):04X}"


BFloatType._create_instance()


class _AtomicFAdd(ll_instr.Instruction):
    """``atomicrmw fadd`` with a sync scope and alignment (llvmlite's AtomicRMW has neither)."""

    def __init__(self, parent, ptr, val, scope: str, ordering: str, align: int, name=""):
        super().__init__(parent, ll.VoidType(), "atomicrmw", (ptr, val), name=name)
        self.scope, self.ordering, self.align = scope, ordering, align

    def descr(self, buf):
        p, v = self.operands
        buf.append(f"atomicrmw fadd {p.type} {p.get_reference()}, {v.type} {v.get_reference()} "
                   f'syncscope("{self.scope}") {self.ordering}, align {self.align}'
                   f"{self._stringify_metadata(leading_comma=True)}\n")


_SCALAR_TYPES = {"i1": ll.IntType(1), "i8": ll.IntType(8), "i16": ll.IntType(16),
                 "i32": ll.IntType(32), "i64": ll.IntType(64), "f16": ll.HalfType(),
                 "bf16": BFloatType(), "f32": ll.FloatType(), "void": ll.VoidType()}


def ltype(dt: DType) -> ll.Type:
    """The LLVM type of an IR dtype (pointers are opaque with their address space)."""
    if dt.is_ptr:
        return ll.PointerType(addrspace=dt.addrspace)
    base = _SCALAR_TYPES[dt.scalar]
    return ll.VectorType(base, dt.count) if dt.is_vector else base


def _mangle(dt: DType) -> str:
    """Intrinsic overload suffix: i32, f32, v2f16, v4bf16 ..."""
    s = {"f16": "f16", "bf16": "bf16", "f32": "f32"}.get(dt.scalar, dt.scalar)
    return f"v{dt.count}{s}" if dt.is_vector else s


_INT_BINOPS = {Ops.ADD: "add", Ops.SUB: "sub", Ops.MUL: "mul", Ops.UDIV: "udiv",
               Ops.UREM: "urem", Ops.SDIV: "sdiv", Ops.SREM: "srem", Ops.SHL: "shl",
               Ops.LSHR: "lshr", Ops.ASHR: "ashr", Ops.AND: "and_", Ops.OR: "or_",
               Ops.XOR: "xor"}
_INT_MINMAX = {Ops.SMIN: "llvm.smin", Ops.SMAX: "llvm.smax", Ops.UMIN: "llvm.umin",
               Ops.UMAX: "llvm.umax"}
_FLOAT_BINOPS = {Ops.FADD: "fadd", Ops.FSUB: "fsub", Ops.FMUL: "fmul", Ops.FDIV: "fdiv"}
_FLOAT_MINMAX = {Ops.FMIN: "llvm.minnum", Ops.FMAX: "llvm.maxnum"}
_ICMP = {"eq": ("signed", "=="), "ne": ("signed", "!="), "slt": ("signed", "<"),
         "sle": ("signed", "<="), "sgt": ("signed", ">"), "sge": ("signed", ">="),
         "ult": ("unsigned", "<"), "ule": ("unsigned", "<="), "ugt": ("unsigned", ">"),
         "uge": ("unsigned", ">=")}
_FCMP = {"oeq": ("ordered", "=="), "one": ("ordered", "!="), "olt": ("ordered", "<"),
         "ole": ("ordered", "<="), "ogt": ("ordered", ">"), "oge": ("ordered", ">="),
         "une": ("unordered", "!="), "ord": ("ordered", "ord"), "uno": ("unordered", "uno")}
_CASTS = {Ops.SITOFP: "sitofp", Ops.UITOFP: "uitofp", Ops.FPTOSI: "fptosi",
          Ops.FPTOUI: "fptoui", Ops.TRUNC: "trunc", Ops.ZEXT: "zext", Ops.SEXT: "sext",
          Ops.BITCAST: "bitcast"}

# (form, A/B element) -> (intrinsic, A/B operand dtype the intrinsic takes, extra-arg style).
# Exact declarations that select on LLVM 22: llvm22-amdgpu-facts.md §1. gfx11/gfx12 bf16 take
# integer vectors (llvm_anyint_ty): the lowering bitcasts; gfx1250 takes real bfloat vectors.
_MMA_INTRINSICS = {
    ("gfx1250", "f16"): ("llvm.amdgcn.wmma.f32.16x16x32.f16.v8f32.v16f16", f16.vec(16), "mods"),
    ("gfx1250", "bf16"): ("llvm.amdgcn.wmma.f32.16x16x32.bf16.v8f32.v16bf16", bf16.vec(16),
                          "mods"),
    ("gfx12", "f16"): ("llvm.amdgcn.wmma.f32.16x16x16.f16.v8f32.v8f16", f16.vec(8), ""),
    ("gfx12", "bf16"): ("llvm.amdgcn.wmma.f32.16x16x16.bf16.v8f32.v8i16", DType("i16", 8), ""),
    ("gfx11", "f16"): ("llvm.amdgcn.wmma.f32.16x16x16.f16.v8f32.v16f16", f16.vec(16), ""),
    ("gfx11", "bf16"): ("llvm.amdgcn.wmma.f32.16x16x16.bf16.v8f32.v16i16", DType("i16", 16),
                        ""),
    ("mfma", "f16"): ("llvm.amdgcn.mfma.f32.16x16x16f16", f16.vec(4), "mfma"),
    ("mfma", "bf16"): ("llvm.amdgcn.mfma.f32.16x16x16bf16.1k", DType("i16", 4), "mfma"),
}
_ASYNC_COPY = {4: "llvm.amdgcn.global.load.async.to.lds.b32",
               8: "llvm.amdgcn.global.load.async.to.lds.b64",
               16: "llvm.amdgcn.global.load.async.to.lds.b128"}
_I1, _I16, _I32 = ll.IntType(1), ll.IntType(16), ll.IntType(32)


def lower(kd: KernelDef, target: str) -> str:
    """LLVM IR text of ``kd`` for ``target`` (e.g. "gfx1250"); deterministic."""
    return str(_Lowering(kd, target).module)


class _Lowering:
    def __init__(self, kd: KernelDef, target: str):
        self.kd = kd
        self.target = get_target(target)
        self.forms = {a.form for a in self.target.atoms.values()}
        self.module = ll.Module(name=kd.name)
        self.module.triple = TRIPLE
        self.module.data_layout = DATA_LAYOUT
        self.decls: dict[str, ll.Function] = {}
        self.values: dict[int, object] = {}
        self.nofine = self.module.add_metadata([])
        self.define_kernel()
        flag = self.module.add_metadata([ll.Constant(_I32, 1),
                                         ll.MetaDataString(self.module,
                                                           "amdhsa_code_object_version"),
                                         ll.Constant(_I32, 500)])
        self.module.add_named_metadata("llvm.module.flags", flag)

    # -- module pieces ---------------------------------------------------------------------
    def fail(self, v: Value, why: str):
        raise LoweringError(f"{self.kd.name}: {v.op.name} %{v.id} ({v.dtype!r}) on "
                            f"{self.target.name}: {why}")

    def intrinsic(self, name: str, ret: ll.Type, args: list[ll.Type]) -> ll.Function:
        if name not in self.decls:
            self.decls[name] = ll.Function(self.module, ll.FunctionType(ret, args), name=name)
        return self.decls[name]

    def define_kernel(self):
        kd = self.kd
        fnty = ll.FunctionType(ll.VoidType(), [ltype(a.dtype) for a in kd.args])
        fn = ll.Function(self.module, fnty, name=kd.name)
        fn.calling_convention = "amdgpu_kernel"
        # llvmlite knows no string attributes: add them to the set directly
        set.add(fn.attributes, f'"amdgpu-flat-work-group-size"="{kd.block_size},'
                               f'{kd.block_size}"')
        set.add(fn.attributes, '"uniform-work-group-size"="true"')
        for a, la, v in zip(kd.args, fn.args, kd.arg_values, strict=True):
            la.name = a.name
            if a.dtype.is_ptr:
                if a.noalias:
                    la.add_attribute("noalias")
                la.add_attribute("nonnull")
                if a.readonly:
                    set.add(la.attributes, "readonly")
                la.attributes.align = a.align
            self.values[v.id] = la
        self.fn = fn
        self.lds = {}
        for alloc in kd.lds:
            gv = ll.GlobalVariable(self.module, ll.ArrayType(ll.IntType(8), alloc.nbytes),
                                   name=f"lds.{alloc.name}", addrspace=3)
            gv.linkage = "internal"
            gv.initializer = ll.Constant(gv.value_type, ll.Undefined)
            gv.align = max(16, alloc.align)
            gv.type = ll.PointerType(addrspace=3)  # opaque, as every other pointer here
            self.lds[alloc.name] = gv
        self.b = ll.IRBuilder(fn.append_basic_block("entry"))
        self.hw_ids()
        self.block(kd.body)
        self.b.ret_void()

    def hw_ids(self):
        """Materialise the hardware ids the kernel uses, once, in the entry block."""
        from .ir import walk
        seen: dict[tuple, Value] = {}
        for v in walk(self.kd.body):
            for s in v.src:
                if s.op in (Ops.THREAD_ID, Ops.WORKGROUP_ID):
                    seen.setdefault((s.op.name, s.arg), s)
            if v.op in (Ops.FOR, Ops.IF):
                r = v.arg
                ys = r.yields if v.op is Ops.FOR else r.then_yields + r.else_yields
                for s in ys:
                    if s.op in (Ops.THREAD_ID, Ops.WORKGROUP_ID):
                        seen.setdefault((s.op.name, s.arg), s)
        for key in sorted(seen, key=lambda k: (k[0], -1 if k[1] is None else k[1])):
            s = seen[key]
            if s.op is Ops.THREAD_ID:
                name = "llvm.amdgcn.workitem.id.x"
            else:
                name = f"llvm.amdgcn.workgroup.id.{'xyz'[s.arg]}"
            self.values[s.id] = self.b.call(self.intrinsic(name, _I32, []), [],
                                            name=f"v{s.id}")

    # -- values ----------------------------------------------------------------------------
    def val(self, v: Value):
        if v.id in self.values:
            return self.values[v.id]
        if v.op is Ops.CONST:
            ty = ltype(v.dtype)
            if v.dtype.is_vector:
                c = ll.Constant(ty, [ll.Constant(ty.element, x) for x in v.arg])
            else:
                c = ll.Constant(ty, v.arg)
            self.values[v.id] = c
            return c
        if v.op is Ops.LDS_ALLOC:
            return self.lds[v.arg]
        raise LoweringError(f"{self.kd.name}: %{v.id} ({v.op.name}) used before definition")

    def block(self, stmts):
        for v in stmts:
            out = self.stmt(v)
            if out is not None:
                self.values[v.id] = out

    def stmt(self, v: Value):  # noqa: C901 - one dispatch over the op groups
        b, op, name = self.b, v.op, f"v{v.id}"
        src = v.src
        if op in _INT_BINOPS:
            return getattr(b, _INT_BINOPS[op])(self.val(src[0]), self.val(src[1]), name=name)
        if op in _INT_MINMAX or op in _FLOAT_MINMAX:
            fn = (_INT_MINMAX | _FLOAT_MINMAX)[op]
            ty = ltype(v.dtype)
            f = self.intrinsic(f"{fn}.{_mangle(v.dtype)}", ty, [ty, ty])
            return b.call(f, [self.val(s) for s in src], name=name)
        if op in _FLOAT_BINOPS:
            return getattr(b, _FLOAT_BINOPS[op])(self.val(src[0]), self.val(src[1]), name=name)
        if op is Ops.NOT:
            return b.not_(self.val(src[0]), name=name)
        if op is Ops.FNEG:
            return b.fneg(self.val(src[0]), name=name)
        if op is Ops.ICMP:
            kind, sym = _ICMP[v.arg]
            fn = b.icmp_signed if kind == "signed" else b.icmp_unsigned
            return fn(sym, self.val(src[0]), self.val(src[1]), name=name)
        if op is Ops.FCMP:
            kind, sym = _FCMP[v.arg]
            fn = b.fcmp_ordered if kind == "ordered" else b.fcmp_unordered
            return fn(sym, self.val(src[0]), self.val(src[1]), name=name)
        if op is Ops.SELECT:
            return b.select(*(self.val(s) for s in src), name=name)
        if op is Ops.FMA:
            ty = ltype(v.dtype)
            f = self.intrinsic(f"llvm.fma.{_mangle(v.dtype)}", ty, [ty, ty, ty])
            return b.call(f, [self.val(s) for s in src], name=name)
        if op is Ops.FPCAST:
            return self.fpcast(self.val(src[0]), src[0].dtype, v.dtype, name)
        if op in _CASTS:
            return getattr(b, _CASTS[op])(self.val(src[0]), ltype(v.dtype), name=name)
        if op is Ops.PTR_CAST:
            return self.val(src[0])  # opaque pointers: the element type lives in the IR only
        if op in GroupOp.Vector:
            return self.vector(v, name)
        if op is Ops.GEP:
            return b.gep(self.val(src[0]), [self.val(src[1])],
                         source_etype=ltype(src[0].dtype.elem), name=name)
        if op in GroupOp.Memory:
            return self.memory(v, name)
        if op is Ops.ASYNC_WAIT:
            self.need_async(v)
            f = self.intrinsic("llvm.amdgcn.s.wait.asynccnt", ll.VoidType(), [_I16])
            b.call(f, [ll.Constant(_I16, v.arg)])
            return None
        if op is Ops.BARRIER:
            b.fence("release", "workgroup")
            b.call(self.intrinsic("llvm.amdgcn.s.barrier", ll.VoidType(), []), [])
            b.fence("acquire", "workgroup")
            return None
        if op is Ops.MMA:
            return self.mma(v, name)
        if op is Ops.FOR:
            return self.for_loop(v)
        if op is Ops.IF:
            return self.if_region(v)
        if op in (Ops.LOOP_RESULT, Ops.IF_RESULT):
            return self.values[src[0].id][v.arg]
        self.fail(v, "no lowering rule")

    def fpcast(self, x, sd: DType, dd: DType, name: str):
        if sd.scalar != "f32" and dd.scalar != "f32":  # f16 <-> bf16: exact through f32
            x = self.b.fpext(x, ltype(f32.vec(sd.count)), name=name + ".f32")
            sd = f32.vec(sd.count)
        if dd.bits > sd.bits:
            return self.b.fpext(x, ltype(dd), name=name)
        return self.b.fptrunc(x, ltype(dd), name=name)

    def vector(self, v: Value, name: str):
        b, src = self.b, v.src
        if v.op is Ops.VBUILD:
            out = ll.Constant(ltype(v.dtype), ll.Undefined)
            for i, s in enumerate(src):
                nm = name if i == len(src) - 1 else f"{name}.{i}"
                out = b.insert_element(out, self.val(s), ll.Constant(_I32, i), name=nm)
            return out
        if v.op is Ops.VEXTRACT:
            return b.extract_element(self.val(src[0]), ll.Constant(_I32, v.arg), name=name)
        if v.op is Ops.VINSERT:
            return b.insert_element(self.val(src[0]), self.val(src[1]), ll.Constant(_I32, v.arg),
                                    name=name)
        a, c = src
        if not a.dtype.is_vector:  # shuffles of scalars: build the vector element by element
            out = ll.Constant(ltype(v.dtype), ll.Undefined)
            for i, m in enumerate(v.arg):
                out = b.insert_element(out, self.val(a if m == 0 else c), ll.Constant(_I32, i),
                                       name=f"{name}.{i}" if i < len(v.arg) - 1 else name)
            return out
        mask = ll.Constant(ll.VectorType(_I32, len(v.arg)), [ll.Constant(_I32, m)
                                                               for m in v.arg])
        return b.shuffle_vector(self.val(a), self.val(c), mask, name=name)

    # -- memory ----------------------------------------------------------------------------
    def predicated(self, v: Value, n_fixed: int, emit, result_type=None, name=""):
        """Run ``emit()`` only where the predicate holds; a result merges 0 elsewhere."""
        if len(v.src) == n_fixed:
            return emit()
        pred = self.val(v.src[n_fixed])
        before = self.b.block
        then_block, done = self.branch(pred, f"v{v.id}.do", f"v{v.id}.done")
        out = emit()
        then_block = self.b.block
        self.b.branch(done)
        self.b.position_at_end(done)
        if result_type is None:
            return None
        phi = self.b.phi(result_type, name=name)
        phi.add_incoming(out, then_block)
        phi.add_incoming(ll.Constant(result_type, None), before)
        return phi

    def branch(self, pred, then_name: str, else_name: str):
        """``br pred, then, else`` into two new blocks named after the value (llvmlite's
        ``if_then`` derives names from the current block, which grow with nesting)."""
        then = self.fn.append_basic_block(then_name)
        other = self.fn.append_basic_block(else_name)
        self.b.cbranch(pred, then, other)
        self.b.position_at_end(then)
        return then, other

    def memory(self, v: Value, name: str):
        b, src, op = self.b, v.src, v.op
        if op is Ops.LOAD:
            ty = ltype(v.dtype)
            p = self.val(src[0])
            return self.predicated(v, 1, lambda: b.load(p, typ=ty, align=v.arg,
                                                        name=name + ".ld"), ty, name)
        if op is Ops.STORE:
            p, x = self.val(src[0]), self.val(src[1])
            return self.predicated(v, 2, lambda: b.store(x, p, align=v.arg) and None)
        if op is Ops.ATOMIC_ADD:
            p, x = self.val(src[0]), self.val(src[1])

            def emit():
                inst = _AtomicFAdd(b.block, p, x, "agent", "monotonic", 4)
                inst.set_metadata("amdgpu.no.fine.grained.memory", self.nofine)
                b._insert(inst)
            return self.predicated(v, 2, emit)
        self.need_async(v)
        p, d = self.val(src[0]), self.val(src[1])
        ptr1, ptr3 = ll.PointerType(addrspace=1), ll.PointerType(addrspace=3)
        f = self.intrinsic(_ASYNC_COPY[v.arg], ll.VoidType(), [ptr1, ptr3, _I32, _I32])
        # offset 0 (applies to both addresses), cpol 0 (default cache policy)
        return self.predicated(v, 2, lambda: b.call(f, [p, d, ll.Constant(_I32, 0),
                                                        ll.Constant(_I32, 0)]) and None)

    def need_async(self, v: Value):
        if not self.target.async_lds_copy:
            self.fail(v, "no async global->LDS copies on this target (gfx1250 only)")

    # -- matrix ----------------------------------------------------------------------------
    def mma(self, v: Value, name: str):
        form = v.arg
        if form not in self.forms:
            self.fail(v, f"MMA form {form!r} does not exist here (target has "
                         f"{', '.join(sorted(self.forms))})")
        ab = v.src[0].dtype
        intr, op_dt, style = _MMA_INTRINSICS[(form, ab.scalar)]
        a, bb, c = (self.val(s) for s in v.src)
        if op_dt != ab:  # bf16 as integer vectors on gfx11/gfx12/mfma
            a = self.b.bitcast(a, ltype(op_dt), name=name + ".a")
            bb = self.b.bitcast(bb, ltype(op_dt), name=name + ".b")
        at, ct = ltype(op_dt), ltype(v.dtype)
        if style == "mods":  # gfx1250: neg_a, A, neg_b, B, c_mod, C, reuse_a, reuse_b (immarg)
            f = self.intrinsic(intr, ct, [_I1, at, _I1, at, _I16, ct, _I1, _I1])
            false = ll.Constant(_I1, 0)
            args = [false, a, false, bb, ll.Constant(_I16, 0), c, false, false]
        elif style == "mfma":  # A, B, C, cbsz, abid, blgp
            f = self.intrinsic(intr, ct, [at, at, ct, _I32, _I32, _I32])
            args = [a, bb, c] + [ll.Constant(_I32, 0)] * 3
        else:
            f = self.intrinsic(intr, ct, [at, at, ct])
            args = [a, bb, c]
        return self.b.call(f, args, name=name)

    # -- control ---------------------------------------------------------------------------
    def for_loop(self, v: Value):
        r = v.arg
        b = self.b
        start, stop, step, *inits = (self.val(s) for s in v.src)
        pre = b.block
        header = self.fn.append_basic_block(f"for{r.id}.header")
        body = self.fn.append_basic_block(f"for{r.id}.body")
        exit_ = self.fn.append_basic_block(f"for{r.id}.exit")
        b.branch(header)
        b.position_at_end(header)
        idx = b.phi(ltype(r.index.dtype), name=f"v{r.index.id}")
        carried = [b.phi(ltype(c.dtype), name=f"v{c.id}") for c in r.carried]
        self.values[r.index.id] = idx
        for c, phi in zip(r.carried, carried, strict=True):
            self.values[c.id] = phi
        b.cbranch(b.icmp_signed("<", idx, stop, name=f"for{r.id}.cond"), body, exit_)
        b.position_at_end(body)
        self.block(r.body)
        yields = [self.val(y) for y in r.yields]
        nxt = b.add(idx, step, name=f"for{r.id}.next")
        latch = b.block
        b.branch(header)
        idx.add_incoming(start, pre)
        idx.add_incoming(nxt, latch)
        for phi, init, y in zip(carried, inits, yields, strict=True):
            phi.add_incoming(init, pre)
            phi.add_incoming(y, latch)
        b.position_at_end(exit_)
        return carried  # LOOP_RESULT slots: the header phis (the values when the loop exits)

    def if_region(self, v: Value):
        r = v.arg
        b = self.b
        pred = self.val(v.src[0])
        _, other = self.branch(pred, f"if{r.id}.then", f"if{r.id}.else")
        self.block(r.then)
        ty = [self.val(y) for y in r.then_yields]
        then_block = b.block
        end = self.fn.append_basic_block(f"if{r.id}.end")
        b.branch(end)
        b.position_at_end(other)
        self.block(r.else_)
        ey = [self.val(y) for y in r.else_yields]
        else_block = b.block
        b.branch(end)
        b.position_at_end(end)
        out = []
        for i, (t, e) in enumerate(zip(ty, ey, strict=True)):
            phi = b.phi(t.type, name=f"if{r.id}.{i}")
            phi.add_incoming(t, then_block)
            phi.add_incoming(e, else_block)
            out.append(phi)
        return out
