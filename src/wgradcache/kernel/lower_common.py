"""What the two LLVM lowerings share: KernelDef -> LLVM IR text, built as text directly.

``Lowering`` walks a kernel's structured regions 1:1 and owns every target-free rule
(arithmetic, compares, casts, vectors, plain loads and stores, predication, FOR and IF); a
backend's subclass (``lower_llvm.AmdgpuLowering``, ``lower_nvptx.NvptxLowering``) supplies
the module's triple, data layout and tail and the target's pieces: the kernel prototype,
hardware ids, bounded loads, atomics, async copies and waits, barriers, transposing LDS
reads and MMAs (``Lowering``'s stubs name them).

Why text and not ``llvmlite.ir``: building the module through llvmlite's object model spent
most of ``lower()`` in that model (name deduplication, per-object ``__str__`` / ``format``),
and lowering was ~15 % of a cache build. The text is built with f-strings, one small
helper per construct, and is byte-identical to what ``llvmlite.ir`` (0.50) printed for the
same kernel, so content keys of existing cache entries stay valid. The formatting follows
llvmlite's: every value, block and global is referenced quoted (``%"v12"``, ``@"lds.a"``),
labels are bare when they are simple identifiers, ``phi``/``select`` carry an empty flag list
(two spaces), half/float constants print as the hex of their double value (``%#16x``, so
0.0 is space-padded), bfloat as ``0xRXXXX``, and intrinsic parameters are named ``%".N"``.
llvmlite's build-time operand type checks are gone with it: ``verify.verify`` (run by
``KernelBuilder.finish``) holds kernels to the IR's typing rules, and LLVM's parser rejects
anything left.

Layout after tinygrad's LLVM renderer: per-op tables (``_BINOPS``, ``_ICMP``, ...), one rule
per op kind (``RULES``: op -> method name, so a subclass's method is the rule), and a FOR
becomes a guarded, bottom-tested body with phis whose incomings are filled in at the latch,
an IF then/else blocks + phis. Opaque pointers carry their address space; addresses are
``getelementptr``s, never integer casts.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from functools import cache

from wgradcache.kernel.builder import _f32_to_bf16_bits
from wgradcache.kernel.ir import DType, GroupOp, KernelDef, Ops, Value, f32
from wgradcache.model.targets import get_target

__all__ = ["LValue", "Lowering", "LoweringError", "RULES", "align", "const", "hw_uses",
           "int_text", "ltype", "mangle", "moving_record", "escape"]

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

def mangle(dt: DType) -> str:
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
    return int_text(x) if fmt is None else fmt(x)

def const(dt: DType, x) -> str:
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

def int_text(x) -> str:
    """An integer constant (llvmlite spells bools ``true``/``false``)."""
    return str(x).lower() if isinstance(x, bool) else str(x)

def moving_record(v: Value) -> bool:
    """A bounded load whose buffer resource is not one of the entry block's."""
    return len(v.src) == 4 or v.src[2].op is not Ops.ARG

def align(a) -> str:
    return "" if a is None else f", align {a:d}"

# -- names -----------------------------------------------------------------------------------
_BARE_LABEL = re.compile(r"[-a-zA-Z$._][-a-zA-Z$._0-9]*$")

def escape(name: str) -> str:
    if "\\" in name or '"' in name:
        return name.replace("\\", "\\5c").replace('"', "\\22")
    return name

class Block:
    """A basic block: its (unique) name, reference and instruction lines."""

    __slots__ = ("name", "ref", "lines")

    def __init__(self, name: str):
        self.name, self.ref, self.lines = name, f'%"{escape(name)}"', []

    def label(self) -> str:
        name = self.name if _BARE_LABEL.match(self.name) else f'"{escape(self.name)}"'
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

def hw_uses(stmts, seen: dict[tuple, Value]):
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
            hw_uses(body, seen)


class Lowering:
    """The walk; a backend's subclass sets the module's ends and supplies the target's
    pieces (the stubs at the end of this class)."""

    triple: str
    datalayout: str
    module_tail: list[str]


    def __init__(self, kd: KernelDef, target: str):
        self.kd = kd
        self.target = get_target(target)
        self.forms = {a.form for a in self.target.atoms.values()}
        self.decls: dict[str, tuple[str, str, str]] = {}  # name -> (ret, ref, declare line)
        self.values: dict[int, object] = {}
        # the function's name scope, deduplicated as llvmlite's NameScope does
        self.used: set[str] = {""}
        self.suffix: dict[str, int] = {}
        self.blocks: list[Block] = []
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
            ref = f'@"{escape(name)}"'
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
            ref = f'%"{escape(self.unique(a.name))}"'
            # llvmlite's order: the flags sorted, then align. Every argument is noundef (the
            # launcher passes each one, defined): without it LLVM 22's straight-line
            # strength reduction cannot prove address arithmetic free of poison, which cost
            # gfx1250's codegen 1.2-2.5x its time, and sm_90 up to a quarter of a main loop
            attrs = ["noundef"]
            if a.dtype.is_ptr:
                attrs = [f for f, on in (("noalias", a.noalias), ("nonnull", True),
                                         ("noundef", True), ("readonly", a.readonly)) if on]
                attrs += [f"align {a.align:d}"] if a.align else []
            params.append(" ".join([ty, *attrs, ref]))
            self.values[v.id] = (ty, ref)
        self.prototype = self.kernel_prototype(f'@"{escape(kd.name)}"', ", ".join(params))
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
            ref = f'@"{escape(f"lds.{alloc.name}")}"'
            self.lds_lines.append(f"{ref} = internal addrspace(3) global [{alloc.nbytes:d} x i8] "
                                  f"undef, align {max(16, alloc.align):d}")
            self.lds[alloc.name] = ("ptr addrspace(3)", ref)

    # -- emission --------------------------------------------------------------------------
    def new_block(self, name: str) -> Block:
        blk = Block(self.unique(name))
        self.blocks.append(blk)
        return blk

    def position(self, blk: Block):
        self.cur, self.lines = blk, blk.lines

    def emit(self, name: str, ty: str, text: str) -> LValue:
        """Append ``%"name" = text`` to the current block."""
        ref = f'%"{self.unique(name)}"'
        self.lines.append(f"  {ref} = {text}")
        return ty, ref

    def void(self, text: str):
        self.lines.append("  " + text)

    def br(self, blk: Block):
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

    def phi(self, ty: str, incoming: list[tuple[LValue, Block]]) -> str:
        return f"phi  {ty} " + ", ".join([f"[{x[1]}, {b.ref}]" for x, b in incoming])

    # -- values ----------------------------------------------------------------------------
    def val(self, v: Value):
        if v.id in self.values:
            return self.values[v.id]
        if v.op is Ops.CONST:
            c = self.values[v.id] = (ltype(v.dtype), const(v.dtype, v.arg))
            return c
        if v.op is Ops.LDS_ALLOC:
            return self.lds[v.arg]
        raise LoweringError(f"{self.kd.name}: %{v.id} ({v.op.name}) used before definition")

    def block(self, stmts):
        for v in stmts:
            rule = self.rules.get(v.op)
            if rule is None:
                self.fail(v, "no lowering rule")
            out = getattr(self, rule)(v, f"v{v.id}")
            if out is not None:
                self.values[v.id] = out

    # -- one rule per op kind (see RULES): (self, v, name) -> lowered value(s) or None --
    def binop(self, v: Value, name: str) -> LValue:
        (ty, a), (_, b) = self.val(v.src[0]), self.val(v.src[1])
        return self.emit(name, ty, f"{_BINOPS[v.op]} {ty} {a}, {b}")

    def elementwise_call(self, v: Value, name: str) -> LValue:
        ty = ltype(v.dtype)
        f = self.intrinsic(f"{_INTRINSIC_OPS[v.op]}.{mangle(v.dtype)}", ty, [ty] * len(v.src))
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
                             f"extractelement {ty} {x}, i32 {int_text(v.arg)}")
        if v.op is Ops.VINSERT:
            (ty, x), (et, e) = self.val(src[0]), self.val(src[1])
            return self.emit(name, ty, f"insertelement {ty} {x}, {et} {e}, i32 {int_text(v.arg)}")
        a, c = src
        if not a.dtype.is_vector:  # shuffles of scalars: build the vector element by element
            pick = (self.val(a), self.val(c))
            return self.build(ltype(v.dtype), [pick[m != 0] for m in v.arg], name)
        (at, x), (ct, y) = self.val(a), self.val(c)
        mask = ", ".join([f"i32 {int_text(m)}" for m in v.arg])
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
        zero = (ty, const(v.dtype, None))
        return self.emit(f"v{v.id}", ty, self.phi(ty, [(out, then_block), (zero, before)]))

    def branch(self, pred: LValue, then_name: str, else_name: str) -> tuple[Block, Block]:
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
                name + ".ld", ty, f"load {ty}, {pt} {p}{align(v.arg)}"), result=True)
        if op is Ops.STORE:
            (pt, p), (xt, x) = self.val(src[0]), self.val(src[1])
            return self.predicated(v, 2, lambda: self.void(
                f"store {xt} {x}, {pt} {p}{align(v.arg)}"))
        if op is Ops.ATOMIC_ADD:
            return self.atomic_add(v, name)
        return self.async_copy(v, name)

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

    # -- the target's pieces: each backend's subclass defines them --------------------------
    def kernel_prototype(self, ref: str, params: str) -> str:
        """The ``define`` line: the calling convention and the block-size attributes."""
        raise NotImplementedError

    def hw_ids(self):
        """Materialise the hardware ids the kernel uses (``hw_uses``) in the entry block."""
        raise NotImplementedError

    def buffer_resources(self):
        """Whatever the bounded loads need made in the entry block (``self.rsrc``)."""
        raise NotImplementedError

    def uniform_predicate(self, pred: LValue, r) -> LValue:
        """The branch condition of a wave-uniform ``if``."""
        raise NotImplementedError

    def no_rule(self, v: Value, name: str):
        self.fail(v, "no lowering rule")

    atomic_add = async_copy = async_wait = async_commit = async_wait_group = barrier = \
        bounded_load = lds_load_tr = mma = no_rule


# op -> the name of its rule (a method, so a subclass's own is the one called); an op
# missing here fails with "no lowering rule"
RULES: dict[Ops, str] = {
    **dict.fromkeys(_BINOPS, "binop"), **dict.fromkeys(_INTRINSIC_OPS, "elementwise_call"),
    **dict.fromkeys(_CASTS, "convert"), **dict.fromkeys(GroupOp.Vector, "vector"),
    **dict.fromkeys(GroupOp.Memory, "memory"),
    Ops.FPCAST: "convert", Ops.NOT: "not_", Ops.FNEG: "fneg", Ops.ICMP: "compare",
    Ops.FCMP: "compare", Ops.SELECT: "select", Ops.PTR_CAST: "ptr_cast", Ops.GEP: "gep",
    Ops.ASYNC_WAIT: "async_wait", Ops.ASYNC_COMMIT: "async_commit",
    Ops.ASYNC_WAIT_GROUP: "async_wait_group", Ops.BARRIER: "barrier", Ops.MMA: "mma",
    Ops.FOR: "for_loop", Ops.IF: "if_region", Ops.BOUNDED_LOAD: "bounded_load",
    Ops.LDS_LOAD_TR: "lds_load_tr", Ops.LOOP_RESULT: "result", Ops.IF_RESULT: "result",
}
Lowering.rules = RULES
