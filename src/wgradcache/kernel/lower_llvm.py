"""Lowering: KernelDef -> LLVM IR text for one AMDGPU target, built as text directly.

Why text and not ``llvmlite.ir``: building the module through llvmlite's object model spent
most of ``lower()`` in that model (name deduplication, per-object ``__str__`` / ``format``),
and lowering was ~15 % of a cache build. The text is now built with f-strings, one small
helper per construct, and is byte-identical to what ``llvmlite.ir`` (0.50) printed for the
same kernel, so content keys of existing cache entries stay valid. The formatting follows
llvmlite's: every value, block and global is referenced quoted (``%"v12"``, ``@"lds.a"``),
labels are bare when they are simple identifiers, ``phi``/``select`` carry an empty flag list
(two spaces), half/float constants print as the hex of their double value (``%#16x``, so
0.0 is space-padded), bfloat as ``0xRXXXX``, and intrinsic parameters are named ``%".N"``.
llvmlite's build-time operand type checks are gone with it: ``verify.verify`` (run by
``KernelBuilder.finish``) holds kernels to the IR's typing rules, and LLVM's parser rejects
anything left.

Why one module of ~650 lines: it has one job, IR op -> LLVM text, and its parts are not
separable without exporting private state. The tables and constant spelling are data for
the rules; the rules (``_RULES``) are methods of ``_Lowering`` because each one reads and
writes the walk's state (the value-name map, the current block, the phis a FOR fills at its
latch, the one buffer resource per pointer, the LDS globals); and the byte-identity with
llvmlite's printing (which keeps every content key valid) is one formatting contract that
a split would spread over files. What could live elsewhere already does: intrinsic names
and lane maps in ``kernel/mma.py``, the target catalog in ``model/targets.py``, typing in
``kernel/verify.py``.

Layout after tinygrad's LLVM renderer: per-op tables (``_BINOPS``, ``_ICMP``, ...), the
per-target differences as data (``mma.INTRINSICS``), one rule per op kind (``_RULES``), and
one ``_Lowering`` that walks the structured regions 1:1 (a FOR becomes a guarded,
bottom-tested body with phis whose incomings are filled in at the latch, an IF becomes
then/else blocks + phis). Opaque pointers carry their address space; addresses are
``getelementptr``s, never integer casts.
Anything the target cannot do fails here, naming the op, the dtype and the target, before
LLVM can abort the process with ``Cannot select``.

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

import re
import struct
from collections.abc import Callable
from functools import cache

from wgradcache.kernel import mma
from wgradcache.kernel.builder import _f32_to_bf16_bits
from wgradcache.kernel.ir import DType, GroupOp, KernelDef, Ops, Value, f32, walk
from wgradcache.model.targets import CODE_OBJECT_VERSION, code_object_version_flag, get_target

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


# A lowered value is its LLVM type text and its reference text: ("float", '%"v12"').
LValue = tuple[str, str]

# -- types -----------------------------------------------------------------------------------
_SCALAR_TYPES = {"i1": "i1", "i8": "i8", "i16": "i16", "i32": "i32", "i64": "i64",
                 "f16": "half", "bf16": "bfloat", "f32": "float", "void": "void"}


@cache
def ltype(dt: DType) -> str:
    """The LLVM type text of an IR dtype (pointers are opaque with their address space)."""
    if dt.is_ptr:
        return f"ptr addrspace({dt.addrspace})" if dt.addrspace else "ptr"
    base = _SCALAR_TYPES[dt.scalar]
    return f"<{dt.count} x {base}>" if dt.is_vector else base


@cache
def _vector_parts(ty: str) -> tuple[int, str] | None:
    """(count, element type) of a vector type text ``<N x T>``; None for a scalar."""
    if not ty.startswith("<"):
        return None
    n, elem = ty[1:-1].split(" x ", 1)
    return int(n), elem


def _mangle(dt: DType) -> str:
    """Intrinsic overload suffix: i32, f32, v2f16, v4bf16 ..."""
    s = {"f16": "f16", "bf16": "bf16", "f32": "f32"}.get(dt.scalar, dt.scalar)
    return f"v{dt.count}{s}" if dt.is_vector else s


# -- constants (llvmlite's spelling) ---------------------------------------------------------
def _hex_double(x: float) -> str:
    """The IEEE double bits as ``%#16x``: how llvmlite prints half and float constants."""
    return format(struct.unpack("Q", struct.pack("d", x))[0], "#16x")


def _round_half(x) -> float:
    try:
        return struct.unpack("e", struct.pack("e", x))[0]
    except struct.error:  # as llvmlite: fall back to single precision
        return struct.unpack("f", struct.pack("f", x))[0]


_FLOAT_CONST: dict[str, Callable[[object], str]] = {
    "f32": lambda x: _hex_double(struct.unpack("f", struct.pack("f", x))[0]),
    "f16": lambda x: _hex_double(_round_half(x)),
    "bf16": lambda x: f"0xR{int(_f32_to_bf16_bits(x)):04X}",
}
_NULL = {"f32": "0.0", "f16": "0.0", "bf16": "0.0", "ptr": "null"}  # ints: "0"


def _scalar_const(scalar: str, x) -> str:
    """One element's constant text; None is the type's null."""
    if x is None:
        return _NULL.get(scalar, "0")
    fmt = _FLOAT_CONST.get(scalar)
    return _int(x) if fmt is None else fmt(x)


def _const(dt: DType, x) -> str:
    """Constant text of ``x`` (a sequence for a vector dtype; None is null everywhere)."""
    if not dt.is_vector:
        return _scalar_const(dt.scalar, x)
    if x is None:
        x = (None,) * dt.count
    el = ltype(dt.base)
    return "<" + ", ".join([f"{el} {_scalar_const(dt.scalar, e)}" for e in x]) + ">"


def _splat(ty: str, elem_text: str) -> str:
    """``elem_text`` as a value of ``ty``: in every element of a vector (llvmlite spells
    vector constants element by element, never ``zeroinitializer``)."""
    parts = _vector_parts(ty)
    if parts is None:
        return elem_text
    n, el = parts
    return "<" + ", ".join([f"{el} {elem_text}"] * n) + ">"


def _int(x) -> str:
    """An integer constant (llvmlite spells bools ``true``/``false``)."""
    return str(x).lower() if isinstance(x, bool) else str(x)


def _moving_record(v: Value) -> bool:
    """A bounded load whose buffer resource is not one of the entry block's."""
    return len(v.src) == 4 or v.src[2].op is not Ops.ARG


def _align(a) -> str:
    return "" if a is None else f", align {a:d}"


# -- names -----------------------------------------------------------------------------------
_BARE_LABEL = re.compile(r"[-a-zA-Z$._][-a-zA-Z$._0-9]*$")


def _escape(name: str) -> str:
    if "\\" in name or '"' in name:
        return name.replace("\\", "\\5c").replace('"', "\\22")
    return name


class _Block:
    """A basic block: its (unique) name, reference and instruction lines."""

    __slots__ = ("name", "ref", "lines")

    def __init__(self, name: str):
        self.name, self.ref, self.lines = name, f'%"{_escape(name)}"', []

    def label(self) -> str:
        name = self.name if _BARE_LABEL.match(self.name) else f'"{_escape(self.name)}"'
        return f"{name}:"


# -- per-op tables ---------------------------------------------------------------------------
_BINOPS = {Ops.ADD: "add", Ops.SUB: "sub", Ops.MUL: "mul", Ops.UDIV: "udiv",
           Ops.UREM: "urem", Ops.SDIV: "sdiv", Ops.SREM: "srem", Ops.SHL: "shl",
           Ops.LSHR: "lshr", Ops.ASHR: "ashr", Ops.AND: "and", Ops.OR: "or", Ops.XOR: "xor",
           Ops.FADD: "fadd", Ops.FSUB: "fsub", Ops.FMUL: "fmul", Ops.FDIV: "fdiv"}
# elementwise intrinsics, overloaded on the result type: llvm.smin.i32, llvm.fma.v2f16 ...
_INTRINSIC_OPS = {Ops.SMIN: "llvm.smin", Ops.SMAX: "llvm.smax", Ops.UMIN: "llvm.umin",
                  Ops.UMAX: "llvm.umax", Ops.FMIN: "llvm.minnum", Ops.FMAX: "llvm.maxnum",
                  Ops.FMA: "llvm.fma"}
# the predicate names are LLVM's
_ICMP = frozenset({"eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge"})
_FCMP = frozenset({"oeq", "one", "olt", "ole", "ogt", "oge", "une", "ord", "uno"})
_CASTS = {Ops.SITOFP: "sitofp", Ops.UITOFP: "uitofp", Ops.FPTOSI: "fptosi",
          Ops.FPTOUI: "fptoui", Ops.TRUNC: "trunc", Ops.ZEXT: "zext", Ops.SEXT: "sext",
          Ops.BITCAST: "bitcast"}

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


def _hw_uses(stmts, seen: dict[tuple, Value]):
    """The first hardware-id value per (op, axis) among statement operands and region
    yields, in ``ir.walk`` order (a region's yields before its statements)."""
    tid, wid = Ops.THREAD_ID, Ops.WORKGROUP_ID
    for v in stmts:
        uses, inner, r = v.src, (), v.arg
        if v.op is Ops.FOR:
            uses, inner = uses + r.yields, (r.body,)
        elif v.op is Ops.IF:
            uses, inner = uses + r.then_yields + r.else_yields, (r.then, r.else_)
        for s in uses:
            if s.op is tid or s.op is wid:
                seen.setdefault((s.op.name, s.arg), s)
        for body in inner:
            _hw_uses(body, seen)


def lower(kd: KernelDef, target: str) -> str:
    """LLVM IR text of ``kd`` for the AMDGPU ``target`` (e.g. "gfx1250"); deterministic.
    ``kernel.lower.lower`` takes any target (NVIDIA through ``lower_nvptx``)."""
    if get_target(target).is_nvidia:
        raise LoweringError(f"{target} is an NVIDIA target: lower it with kernel.lower.lower "
                            "(lower_nvptx)")
    return _Lowering(kd, target).text()


class _Lowering:
    # what a module of this backend starts and ends with (the NVPTX lowering overrides them)
    triple = TRIPLE
    datalayout = DATA_LAYOUT
    module_tail = _MODULE_FLAGS

    def __init__(self, kd: KernelDef, target: str):
        self.kd = kd
        self.target = get_target(target)
        self.forms = {a.form for a in self.target.atoms.values()}
        self.decls: dict[str, tuple[str, str, str]] = {}  # name -> (ret, ref, declare line)
        self.values: dict[int, object] = {}
        # the function's name scope, deduplicated as llvmlite's NameScope does
        self.used: set[str] = {""}
        self.suffix: dict[str, int] = {}
        self.blocks: list[_Block] = []
        self.define_kernel()

    def text(self) -> str:
        kd = self.kd
        out = [f'; ModuleID = "{kd.name}"', f'target triple = "{self.triple}"',
               f'target datalayout = "{self.datalayout}"', "", self.prototype, "{"]
        for blk in self.blocks:
            out.append(blk.label())
            out += blk.lines
        out += ["}", ""]
        out += self.lds_lines
        for _, _, decl in self.decls.values():
            out += [decl, ""]
        return "\n".join(out + self.module_tail)

    # -- module pieces ---------------------------------------------------------------------
    def fail(self, v: Value, why: str):
        raise LoweringError(f"{self.kd.name}: {v.op.name} %{v.id} ({v.dtype!r}) on "
                            f"{self.target.name}: {why}")

    def unique(self, name: str) -> str:
        """``name``, or ``name.N`` with the next free N when taken (llvmlite's rule)."""
        if name in self.used:
            base = name
            while name in self.used:
                n = self.suffix[base] = self.suffix.get(base, 0) + 1
                name = f"{base}.{n}"
        self.used.add(name)
        return name

    def intrinsic(self, name: str, ret: str, args: list[str]) -> str:
        """Declare ``name`` once (in first-use order); returns the name."""
        if name not in self.decls:
            params = ", ".join([f'{t} %".{i}"' for i, t in enumerate(args, 1)])
            ref = f'@"{_escape(name)}"'
            self.decls[name] = (ret, ref, f"declare {ret} {ref}({params})")
        return name

    def define_kernel(self):
        kd = self.kd
        # llvmlite names each parameter and the return value ".N" before the real names
        for _ in range(len(kd.args) + 1):
            self.unique("")
        params = []
        for a, v in zip(kd.args, kd.arg_values, strict=True):
            ty = ltype(a.dtype)
            ref = f'%"{_escape(self.unique(a.name))}"'
            attrs = []  # llvmlite's order: the flags sorted, then align
            if a.dtype.is_ptr:
                attrs = [f for f, on in (("noalias", a.noalias), ("nonnull", True),
                                         ("readonly", a.readonly)) if on]
                attrs += [f"align {a.align:d}"] if a.align else []
            params.append(" ".join([ty, *attrs, ref]))
            self.values[v.id] = (ty, ref)
        b = kd.block_size
        self.prototype = (f'define amdgpu_kernel void @"{_escape(kd.name)}"({", ".join(params)}) '
                          f'"amdgpu-flat-work-group-size"="{b},{b}" '
                          '"uniform-work-group-size"="true"')
        self.lds: dict[str, LValue] = {}
        self.lds_lines = []
        self.declare_lds()
        self.position(self.new_block("entry"))
        self.hw_ids()
        self.buffer_resources()
        self.block(kd.body)
        self.void("ret void")

    def declare_lds(self):
        """One ``addrspace(3)`` global per LDS allocation, sized exactly (``self.lds``: the
        reference each allocation's uses take)."""
        for alloc in self.kd.lds:
            ref = f'@"{_escape(f"lds.{alloc.name}")}"'
            self.lds_lines.append(f"{ref} = internal addrspace(3) global [{alloc.nbytes:d} x i8] "
                                  f"undef, align {max(16, alloc.align):d}")
            self.lds[alloc.name] = ("ptr addrspace(3)", ref)

    def hw_ids(self):
        """Materialise the hardware ids the kernel uses, once, in the entry block."""
        seen: dict[tuple, Value] = {}
        _hw_uses(self.kd.body, seen)
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
            if v.op is not Ops.BOUNDED_LOAD or _moving_record(v):
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

    # -- emission --------------------------------------------------------------------------
    def new_block(self, name: str) -> _Block:
        blk = _Block(self.unique(name))
        self.blocks.append(blk)
        return blk

    def position(self, blk: _Block):
        self.cur, self.lines = blk, blk.lines

    def emit(self, name: str, ty: str, text: str) -> LValue:
        """Append ``%"name" = text`` to the current block."""
        ref = f'%"{self.unique(name)}"'
        self.lines.append(f"  {ref} = {text}")
        return ty, ref

    def void(self, text: str):
        self.lines.append("  " + text)

    def br(self, blk: _Block):
        self.void(f"br label {blk.ref}")

    def call(self, fn: str, args: list[LValue], name: str = "") -> LValue | None:
        ret, ref, _ = self.decls[fn]
        text = f"call {ret} {ref}({', '.join([f'{t} {r}' for t, r in args])})"
        if ret == "void":
            self.void(text)
            return None
        return self.emit(name, ret, text)

    def cast(self, op: str, x: LValue, ty: str, name: str) -> LValue:
        """``op x to ty``; nothing when ``x`` already has type ``ty`` (as llvmlite)."""
        if x[0] == ty:
            return x
        return self.emit(name, ty, f"{op} {x[0]} {x[1]} to {ty}")

    def phi(self, ty: str, incoming: list[tuple[LValue, _Block]]) -> str:
        return f"phi  {ty} " + ", ".join([f"[{x[1]}, {b.ref}]" for x, b in incoming])

    # -- values ----------------------------------------------------------------------------
    def val(self, v: Value):
        if v.id in self.values:
            return self.values[v.id]
        if v.op is Ops.CONST:
            c = self.values[v.id] = (ltype(v.dtype), _const(v.dtype, v.arg))
            return c
        if v.op is Ops.LDS_ALLOC:
            return self.lds[v.arg]
        raise LoweringError(f"{self.kd.name}: %{v.id} ({v.op.name}) used before definition")

    def block(self, stmts):
        for v in stmts:
            rule = self.rules.get(v.op)
            if rule is None:
                self.fail(v, "no lowering rule")
            out = rule(self, v, f"v{v.id}")
            if out is not None:
                self.values[v.id] = out

    # -- one rule per op kind (see _RULES): (self, v, name) -> lowered value(s) or None --
    def binop(self, v: Value, name: str) -> LValue:
        (ty, a), (_, b) = self.val(v.src[0]), self.val(v.src[1])
        return self.emit(name, ty, f"{_BINOPS[v.op]} {ty} {a}, {b}")

    def elementwise_call(self, v: Value, name: str) -> LValue:
        ty = ltype(v.dtype)
        f = self.intrinsic(f"{_INTRINSIC_OPS[v.op]}.{_mangle(v.dtype)}", ty, [ty] * len(v.src))
        return self.call(f, [self.val(s) for s in v.src], name)

    def not_(self, v: Value, name: str) -> LValue:
        ty, a = self.val(v.src[0])
        return self.emit(name, ty, f"xor {ty} {a}, {_splat(ty, '-1')}")

    def fneg(self, v: Value, name: str) -> LValue:
        ty, a = self.val(v.src[0])
        return self.emit(name, ty, f"fneg {ty} {a}")

    def compare(self, v: Value, name: str) -> LValue:
        kind, preds = ("icmp", _ICMP) if v.op is Ops.ICMP else ("fcmp", _FCMP)
        if v.arg not in preds:
            self.fail(v, f"unknown predicate {v.arg!r}")
        (ty, a), (_, b) = self.val(v.src[0]), self.val(v.src[1])
        parts = _vector_parts(ty)
        rty = f"<{parts[0]} x i1>" if parts else "i1"
        return self.emit(name, rty, f"{kind} {v.arg} {ty} {a}, {b}")

    def select(self, v: Value, name: str) -> LValue:
        (ct, c), (ty, a), (bt, b) = (self.val(s) for s in v.src)
        return self.emit(name, ty, f"select  {ct} {c}, {ty} {a}, {bt} {b}")

    def convert(self, v: Value, name: str) -> LValue:
        if v.op is Ops.FPCAST:
            return self.fpcast(self.val(v.src[0]), v.src[0].dtype, v.dtype, name)
        return self.cast(_CASTS[v.op], self.val(v.src[0]), ltype(v.dtype), name)

    def ptr_cast(self, v: Value, name: str) -> LValue:
        return self.val(v.src[0])  # opaque pointers: the element type lives in the IR only

    def gep(self, v: Value, name: str) -> LValue:
        (pt, p), (it, i) = self.val(v.src[0]), self.val(v.src[1])
        return self.emit(name, pt, f"getelementptr {ltype(v.src[0].dtype.elem)}, {pt} {p}, "
                                   f"{it} {i}")

    def async_wait(self, v: Value, name: str) -> None:
        self.need_async(v)
        f = self.intrinsic("llvm.amdgcn.s.wait.asynccnt", "void", ["i16"])
        self.call(f, [("i16", _int(v.arg))])

    def barrier(self, v: Value, name: str) -> None:
        self.void('fence syncscope("workgroup") release')
        self.call(self.intrinsic("llvm.amdgcn.s.barrier", "void", []), [])
        self.void('fence syncscope("workgroup") acquire')

    def result(self, v: Value, name: str) -> LValue:
        return self.values[v.src[0].id][v.arg]

    def fpcast(self, x: LValue, sd: DType, dd: DType, name: str) -> LValue:
        if sd.scalar != "f32" and dd.scalar != "f32":  # f16 <-> bf16: exact through f32
            x = self.cast("fpext", x, ltype(f32.vec(sd.count)), name + ".f32")
            sd = f32.vec(sd.count)
        return self.cast("fpext" if dd.bits > sd.bits else "fptrunc", x, ltype(dd), name)

    def vector(self, v: Value, name: str) -> LValue:
        src = v.src
        if v.op is Ops.VBUILD:
            return self.build(ltype(v.dtype), [self.val(s) for s in src], name)
        if v.op is Ops.VEXTRACT:
            ty, x = self.val(src[0])
            return self.emit(name, _vector_parts(ty)[1],
                             f"extractelement {ty} {x}, i32 {_int(v.arg)}")
        if v.op is Ops.VINSERT:
            (ty, x), (et, e) = self.val(src[0]), self.val(src[1])
            return self.emit(name, ty, f"insertelement {ty} {x}, {et} {e}, i32 {_int(v.arg)}")
        a, c = src
        if not a.dtype.is_vector:  # shuffles of scalars: build the vector element by element
            pick = (self.val(a), self.val(c))
            return self.build(ltype(v.dtype), [pick[m != 0] for m in v.arg], name)
        (at, x), (ct, y) = self.val(a), self.val(c)
        mask = ", ".join([f"i32 {_int(m)}" for m in v.arg])
        return self.emit(name, f"<{len(v.arg)} x {_vector_parts(at)[1]}>",
                         f"shufflevector {at} {x}, {ct} {y}, <{len(v.arg)} x i32> <{mask}>")

    def build(self, ty: str, elems: list[LValue], name: str) -> LValue:
        """A vector from scalars: insertelements into undef; the last one is ``name``."""
        out = (ty, _splat(ty, "undef"))
        last = len(elems) - 1
        for i, (et, e) in enumerate(elems):
            out = self.emit(name if i == last else f"{name}.{i}", ty,
                            f"insertelement {ty} {out[1]}, {et} {e}, i32 {i}")
        return out

    # -- memory ----------------------------------------------------------------------------
    def predicated(self, v: Value, n_fixed: int, emit, result: bool = False):
        """Run ``emit()`` only where the predicate holds; a result (of ``v.dtype``, named
        after ``v``) merges 0 elsewhere."""
        if len(v.src) == n_fixed:
            return emit()
        pred = self.val(v.src[n_fixed])
        before = self.cur
        _, done = self.branch(pred, f"v{v.id}.do", f"v{v.id}.done")
        out = emit()
        then_block = self.cur
        self.br(done)
        self.position(done)
        if not result:
            return None
        ty = ltype(v.dtype)
        zero = (ty, _const(v.dtype, None))
        return self.emit(f"v{v.id}", ty, self.phi(ty, [(out, then_block), (zero, before)]))

    def branch(self, pred: LValue, then_name: str, else_name: str) -> tuple[_Block, _Block]:
        """``br pred, then, else`` into two new blocks named after the value."""
        then, other = self.new_block(then_name), self.new_block(else_name)
        self.void(f"br {pred[0]} {pred[1]}, label {then.ref}, label {other.ref}")
        self.position(then)
        return then, other

    def memory(self, v: Value, name: str):
        src, op = v.src, v.op
        if op is Ops.LOAD:
            ty = ltype(v.dtype)
            pt, p = self.val(src[0])
            return self.predicated(v, 1, lambda: self.emit(
                name + ".ld", ty, f"load {ty}, {pt} {p}{_align(v.arg)}"), result=True)
        if op is Ops.STORE:
            (pt, p), (xt, x) = self.val(src[0]), self.val(src[1])
            return self.predicated(v, 2, lambda: self.void(
                f"store {xt} {x}, {pt} {p}{_align(v.arg)}"))
        if op is Ops.ATOMIC_ADD:
            (pt, p), (xt, x) = self.val(src[0]), self.val(src[1])
            return self.predicated(v, 2, lambda: self.void(
                f'atomicrmw fadd {pt} {p}, {xt} {x} syncscope("agent") monotonic, align 4'
                + _NOFINE))
        if op is Ops.ASYNC_COPY_ZFILL:
            self.fail(v, "no zero-filling async copy on this target (NVIDIA cp.async; gfx1250 "
                         "copies with a zero store beside: copies.copy_or_zero_fill)")
        self.need_async(v)
        p, d = self.val(src[0]), self.val(src[1])
        f = self.intrinsic(_ASYNC_COPY[v.arg], "void",
                           ["ptr addrspace(1)", "ptr addrspace(3)", "i32", "i32"])
        # offset 0 (applies to both addresses), cpol 0 (default cache policy)
        return self.predicated(v, 2, lambda: self.call(f, [p, d, ("i32", "0"), ("i32", "0")]))

    def lds_load_tr(self, v: Value, name: str) -> LValue:
        if v.arg != "ds_load_tr16_b128" or self.target.lds_read_tr != v.arg:
            self.fail(v, f"no {v.arg} on this target (its transposing read: "
                         f"{self.target.lds_read_tr or 'none'})")
        ty = ltype(v.dtype)
        f = self.intrinsic(f"llvm.amdgcn.ds.load.tr16.b128.{_mangle(v.dtype)}", ty,
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
        rsrc = self.moving_rsrc(v, name) if _moving_record(v) else \
            self.rsrc[(v.src[0].id, v.src[2].id)]
        ty, mangle = _BUFFER_TYPES[v.dtype.nbytes]
        f = self.intrinsic(f"llvm.amdgcn.raw.ptr.buffer.load.{mangle}", ty,
                           ["ptr addrspace(8)", "i32", "i32", "i32"])
        # voffset (in the range check), soffset 0, aux 0 (default cache policy)
        raw = self.call(f, [rsrc, self.val(v.src[1]), ("i32", "0"), ("i32", "0")],
                        name + ".raw")
        return self.cast("bitcast", raw, ltype(v.dtype), name)

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

    # -- control ---------------------------------------------------------------------------
    def for_loop(self, v: Value, name: str) -> list[LValue]:
        """A bottom-tested loop behind a guard (LLVM's rotated form): ``start < stop`` or
        straight to the exit, then the body with the phis, and ``next < stop`` at the latch.

        The top-tested form (header test, body, back edge) made the values live at the exit
        the header phis, which codegen could not coalesce with the body's new values: every
        iteration copied every accumulator twice (64 ``v_mov`` per iteration at 64
        accumulator VGPRs on gfx1250). Codegen runs no middle-end passes, so nothing else
        rotates the loop."""
        r = v.arg
        start, stop, step, *inits = (self.val(s) for s in v.src)
        ity = ltype(r.index.dtype)
        guard = self.emit(f"for{r.id}.guard", "i1", f"icmp slt {ity} {start[1]}, {stop[1]}")
        pre = self.cur
        body = self.new_block(f"for{r.id}.body")
        exit_ = self.new_block(f"for{r.id}.exit")
        self.void(f"br i1 {guard[1]}, label {body.ref}, label {exit_.ref}")
        self.position(body)
        # phis first, their incomings are known at the latch: the lines are filled in there
        idx = self.emit(f"v{r.index.id}", ity, "")
        carried = [self.emit(f"v{c.id}", ltype(c.dtype), "") for c in r.carried]
        self.values[r.index.id] = idx
        for c, phi in zip(r.carried, carried, strict=True):
            self.values[c.id] = phi
        self.block(r.body)
        yields = [self.val(y) for y in r.yields]
        nxt = self.emit(f"for{r.id}.next", ity, f"add {ity} {idx[1]}, {step[1]}")
        cond = self.emit(f"for{r.id}.cond", "i1", f"icmp slt {ity} {nxt[1]}, {stop[1]}")
        latch = self.cur
        self.void(f"br i1 {cond[1]}, label {body.ref}, label {exit_.ref}")
        incoming = [[(start, pre), (nxt, latch)]]
        incoming += [[(init, pre), (y, latch)] for init, y in zip(inits, yields, strict=True)]
        for i, (phi, inc) in enumerate(zip([idx, *carried], incoming, strict=True)):
            body.lines[i] += self.phi(phi[0], inc)
        self.position(exit_)
        # LOOP_RESULT slots: the initial values when the loop ran no iteration, else the last
        # iteration's yields
        return [self.emit(f"v{c.id}.out", ty, self.phi(ty, [(init, pre), (y, latch)]))
                for c, (ty, _), init, y in zip(r.carried, carried, inits, yields, strict=True)]

    def uniform_predicate(self, pred: LValue, r) -> LValue:
        """One lane's predicate: a scalar branch (the emulator checks it is uniform)."""
        z = self.cast("zext", pred, "i32", f"if{r.id}.z")
        f = self.intrinsic("llvm.amdgcn.readfirstlane.i32", "i32", ["i32"])
        u = self.call(f, [z], f"if{r.id}.u")
        return self.emit(f"if{r.id}.c", "i1", f"icmp ne i32 {u[1]}, 0")

    def if_region(self, v: Value, name: str) -> list[LValue]:
        r = v.arg
        pred = self.val(v.src[0])
        if r.uniform:
            pred = self.uniform_predicate(pred, r)
        _, other = self.branch(pred, f"if{r.id}.then", f"if{r.id}.else")
        self.block(r.then)
        ty = [self.val(y) for y in r.then_yields]
        then_block = self.cur
        end = self.new_block(f"if{r.id}.end")
        self.br(end)
        self.position(other)
        self.block(r.else_)
        ey = [self.val(y) for y in r.else_yields]
        else_block = self.cur
        self.br(end)
        self.position(end)
        return [self.emit(f"if{r.id}.{i}", t[0], self.phi(t[0], [(t, then_block),
                                                                 (e, else_block)]))
                for i, (t, e) in enumerate(zip(ty, ey, strict=True))]


# op -> rule; an op missing here fails with "no lowering rule"
_RULES: dict[Ops, Callable] = {
    **dict.fromkeys(_BINOPS, _Lowering.binop),
    **dict.fromkeys(_INTRINSIC_OPS, _Lowering.elementwise_call),
    **dict.fromkeys(_CASTS, _Lowering.convert), **dict.fromkeys(GroupOp.Vector, _Lowering.vector),
    **dict.fromkeys(GroupOp.Memory, _Lowering.memory),
    Ops.FPCAST: _Lowering.convert, Ops.NOT: _Lowering.not_,
    Ops.FNEG: _Lowering.fneg, Ops.ICMP: _Lowering.compare, Ops.FCMP: _Lowering.compare,
    Ops.SELECT: _Lowering.select, Ops.PTR_CAST: _Lowering.ptr_cast, Ops.GEP: _Lowering.gep,
    Ops.ASYNC_WAIT: _Lowering.async_wait, Ops.BARRIER: _Lowering.barrier, Ops.MMA: _Lowering.mma,
    Ops.FOR: _Lowering.for_loop, Ops.IF: _Lowering.if_region,
    Ops.BOUNDED_LOAD: _Lowering.bounded_load, Ops.LDS_LOAD_TR: _Lowering.lds_load_tr,
    Ops.LOOP_RESULT: _Lowering.result, Ops.IF_RESULT: _Lowering.result,
}
_Lowering.rules = _RULES  # a subclass for another target replaces the rules it overrides
