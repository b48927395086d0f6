"""KernelBuilder: the one way generators write kernels in the IR (``kernel/ir.py``).

# API-STABLE

The API below is stable: it only grows (no renames, no removals).

Values are ``ir.Value``; wherever a value is expected, a Python ``int``/``float`` is also
accepted and becomes a constant of the other operand's type (or ``i32`` / ``f32`` when no
other operand fixes it). Arithmetic methods are generated from one table (``_BINOPS``), as
llvmlite's ``_binop`` does; signedness lives in the op (``sdiv`` vs ``udiv``, ``icmp("ult")``),
never in the type. Regions are context managers (``for_``, ``if_``) or callbacks (``loop``,
``if_else``) when they yield values. Scalar integer ops on two constants fold at build time
(LLVM semantics; undefined cases such as x/0 stay run-time ops) and identities (x+0, x*1,
x*0, x&-1, x<<0 ...) return an existing value, so a method may return a constant or one of its
operands rather than a new node.

Definitions (kernel-wide, usable anywhere)::

    arg(name, dtype, *, noalias=True, readonly=False, align=16) -> Value   # ABI order = call order
    lds(name, nbytes, elem=i8, align=16) -> Value      # ptr(elem, LDS) to a named allocation
    const(value, dtype) -> Value                       # vector: a tuple, or a scalar to splat
    thread_id() -> i32                                 # workitem id x, 0..block_size-1
    workgroup_id(axis) -> i32                          # axis 0|1|2

Integer (scalar or vector, same dtype both sides)::

    add sub mul udiv urem sdiv srem shl lshr ashr and_ or_ xor smin smax umin umax
    not_(a)
    icmp(pred, a, b)   pred in eq ne slt sle sgt sge ult ule ugt uge  -> i1 (or <n x i1>)

Float::

    fadd fsub fmul fdiv fmin fmax   fneg(a)   fma(a, b, c)
    fcmp(pred, a, b)   pred in oeq one olt ole ogt oge une ord uno

Other ALU and casts::

    select(cond, a, b)
    fpcast(v, to)  sitofp(v, to)  uitofp(v, to)  fptosi(v, to)  fptoui(v, to)
    trunc(v, to)  zext(v, to)  sext(v, to)  bitcast(v, to)  ptr_cast(p, elem)
    convert(v, to, signed=True)      # picks the cast above from the two dtypes

Vectors::

    vec(*elems)  splat(x, n)  extract(v, i)  insert(v, x, i)  shuffle(a, b, mask)
    concat(a, b)  subvec(v, start, n)

Memory (``pred``: an i1 per lane; False => no access at all, a load yields 0)::

    gep(p, index) -> ptr                  # p + index * sizeof(p.elem), index i32/i64 (signed)
    load(p, vec=1, *, pred=None, align=None) -> elem | <vec x elem>
    store(p, value, *, pred=None, align=None)         # value.dtype.base == p.elem
    atomic_add(p, value, *, pred=None)    # global; f32, <2 x f16>, <2 x bf16>; no result
    bounded_load(p, byte_off, num_bytes, vec=1, *, align=None, base=None)  # zero past range
    lds_load_tr(p) -> <8 x elem>          # gfx1250: 8x8 transpose per 8 lanes (16-bit elems)
    async_copy(src, dst, nbytes, *, pred=None)        # gfx1250: global -> LDS, 4|8|16 bytes
    async_copy_zfill(src, dst, nbytes, keep)  # NVIDIA cp.async: zeros where not keep
    async_wait(n=0)                       # until <= n async copies of this wave in flight
    async_commit()                        # NVIDIA: close this lane's cp.async group
    async_wait_group(n)                   # NVIDIA: until <= n committed groups pending
    barrier()                             # workgroup barrier (LDS release/acquire)

``align`` defaults to the element size; pass the real alignment of wide LDS accesses.

Matrix::

    mma(form, a, b, c) -> Value           # one atom per wave; lane maps in kernel/mma.py

Control::

    with kb.for_(start, stop, step=1, carried=(v0, ...)) as loop:   # step > 0, i < stop
        loop.index, loop.carried ...; loop.yield_(next0, ...)
    loop.results                           # carried values after the loop
    kb.loop(start, stop, step, inits, body) -> tuple   # body(index, *carried) -> tuple
    with kb.if_(pred): ...                 # per-lane predicate, no results
    with kb.if_(pred, uniform=32): ...     # pred equal over each wave: a scalar branch
    kb.if_else(pred, then_fn, else_fn) -> tuple        # each fn() returns the yielded values

    kb.finish() -> KernelDef               # runs verify.verify

Example 1: 1-D vector add ``c[i] = a[i] + b[i]`` for ``i < n``::

    kb = KernelBuilder("vadd", block_size=256)
    a, b, c = (kb.arg(x, ptr(f32)) for x in "abc")
    n = kb.arg("n", i32)
    i = kb.add(kb.mul(kb.workgroup_id(0), 256), kb.thread_id())
    with kb.if_(kb.icmp("slt", i, n)):
        kb.store(kb.gep(c, i), kb.fadd(kb.load(kb.gep(a, i)), kb.load(kb.gep(b, i))))
    kdef = kb.finish()

Example 2: one 16x16xK WMMA tile on gfx1250 (one wave; A row-major [16, K] f16, B
row-major [K, 16] f16, D row-major [16, 16] f32, K a multiple of 32)::

    lay = mma.layout("gfx1250")
    kb = KernelBuilder("tile", block_size=32)
    A, B, D = kb.arg("a", ptr(f16)), kb.arg("b", ptr(f16)), kb.arg("d", ptr(f32))
    K = kb.arg("k", i32)
    lane = kb.thread_id()
    c16, g = kb.urem(lane, 16), kb.udiv(lane, 16)       # row of A / col of B; lane group
    with kb.for_(0, K, 32, carried=[kb.const(0.0, f32.vec(8))]) as loop:
        kbase = kb.add(loop.index, kb.mul(g, lay.k_group_stride))
        a_parts, b_elems = [], []
        for slot, off, n in mma.k_runs(lay):             # A: k-contiguous runs -> vector loads
            a_parts.append(kb.load(kb.gep(A, kb.add(kb.mul(c16, K), kb.add(kbase, off))), n))
        for i, off in enumerate(lay.k_offsets):          # B: one element per slot
            b_elems.append(kb.load(kb.gep(B, kb.add(kb.mul(kb.add(kbase, off), 16), c16))))
        a = kb.concat(*a_parts)
        loop.yield_(kb.mma("gfx1250", a, kb.vec(*b_elems), loop.carried[0]))
    acc = loop.results[0]
    for r, roff in enumerate(lay.c_row_offsets):         # D[row, col] from slot r
        row = kb.add(kb.mul(g, lay.c_row_group_stride), roff)
        kb.store(kb.gep(D, kb.add(kb.mul(row, 16), c16)), kb.extract(acc, r))
    kdef = kb.finish()

Why one module: it is one class whose methods are the IR's whole surface,
and this docstring is its reference; split by op group, a generator author would read
four files to find ``load`` beside ``gep`` beside ``if_``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from wgradcache.kernel import mma as _mma
from wgradcache.kernel.ir import (
    FCMP_PREDICATES,
    GLOBAL,
    ICMP_PREDICATES,
    LDS,
    DType,
    ForRegion,
    IfRegion,
    KernelArg,
    KernelDef,
    LdsAlloc,
    Ops,
    Value,
    bf16,
    f16,
    f32,
    i1,
    i8,
    i32,
    i64,
    ptr,
    void,
)

__all__ = ["KernelBuilder", "Loop", "BuildError", "round_to_dtype"]

Operand = Value | int | float


class BuildError(ValueError):
    """A kernel was written wrong (types, regions, names): raised while building."""


def _f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bit pattern (uint16), round to nearest even, NaN kept quiet."""
    b = np.asarray(x, np.float32).view(np.uint32)
    rounded = ((b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16))
    nan = (b & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    return np.where(nan, (b >> np.uint32(16)) | np.uint32(0x40), rounded).astype(np.uint16)


def round_to_dtype(value: float, dtype: DType) -> float:
    """A Python float rounded (nearest even) to f16/bf16/f32: the exact value a constant holds."""
    if dtype.scalar == "f16":
        return float(np.float16(value))
    if dtype.scalar == "f32":
        return float(np.float32(value))
    bits = _f32_to_bf16_bits(np.float32(value)).astype(np.uint32) << np.uint32(16)
    return float(bits.view(np.float32))


def _wrap_int(value: int, dtype: DType) -> int:
    """An integer constant in the type's two's-complement range, stored signed (i1: 0/1)."""
    bits = dtype.bits
    v = int(value) & ((1 << bits) - 1)
    if bits == 1:
        return v
    return v - (1 << bits) if v >> (bits - 1) else v


@dataclass
class Loop:
    """Handle of a ``for_`` region: ``index``, ``carried`` inside; ``results`` after it."""

    index: Value
    carried: tuple[Value, ...]
    results: tuple[Value, ...] = ()
    _yields: tuple[Value, ...] | None = field(default=None, repr=False)

    def yield_(self, *values: Value) -> None:
        """The carried values of the next iteration (one per slot, same dtypes)."""
        if self._yields is not None:
            raise BuildError("loop.yield_ called twice")
        self._yields = tuple(values)


# name -> (op, operand kind, doc)
_BINOPS: dict[str, tuple[Ops, str]] = {
    "add": (Ops.ADD, "int"), "sub": (Ops.SUB, "int"), "mul": (Ops.MUL, "int"),
    "udiv": (Ops.UDIV, "int"), "urem": (Ops.UREM, "int"),
    "sdiv": (Ops.SDIV, "int"), "srem": (Ops.SREM, "int"),
    "shl": (Ops.SHL, "int"), "lshr": (Ops.LSHR, "int"), "ashr": (Ops.ASHR, "int"),
    "and_": (Ops.AND, "int"), "or_": (Ops.OR, "int"), "xor": (Ops.XOR, "int"),
    "smin": (Ops.SMIN, "int"), "smax": (Ops.SMAX, "int"),
    "umin": (Ops.UMIN, "int"), "umax": (Ops.UMAX, "int"),
    "fadd": (Ops.FADD, "float"), "fsub": (Ops.FSUB, "float"), "fmul": (Ops.FMUL, "float"),
    "fdiv": (Ops.FDIV, "float"), "fmin": (Ops.FMIN, "float"), "fmax": (Ops.FMAX, "float"),
}

_CAST_RULES: dict[Ops, Callable[[DType, DType], bool]] = {
    Ops.FPCAST: lambda s, d: s.is_float and d.is_float,
    Ops.SITOFP: lambda s, d: s.is_int and d.is_float,
    Ops.UITOFP: lambda s, d: s.is_int and d.is_float,
    Ops.FPTOSI: lambda s, d: s.is_float and d.is_int,
    Ops.FPTOUI: lambda s, d: s.is_float and d.is_int,
    Ops.TRUNC: lambda s, d: s.is_int and d.is_int and d.bits < s.bits,
    Ops.ZEXT: lambda s, d: s.is_int and d.is_int and d.bits > s.bits,
    Ops.SEXT: lambda s, d: s.is_int and d.is_int and d.bits > s.bits,
}


class KernelBuilder:
    """Builds one ``KernelDef``; see the module docstring for the whole API."""

    def __init__(self, name: str, block_size: int):
        if not name.replace("_", "").replace(".", "").isalnum():
            raise BuildError(f"kernel name {name!r}: use letters, digits, '_' and '.'")
        if block_size < 1 or block_size > 1024:
            raise BuildError(f"block_size {block_size} outside 1..1024")
        self.name = name
        self.block_size = block_size
        self._next_id = 0
        self._args: list[KernelArg] = []
        self._arg_values: list[Value] = []
        self._lds: list[LdsAlloc] = []
        self._lds_values: dict[str, Value] = {}
        self._consts: dict[tuple, Value] = {}
        self._hw: dict[tuple, Value] = {}
        self._blocks: list[list[Value]] = [[]]

    # -- plumbing ---------------------------------------------------------------------------
    def _id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _emit(self, op: Ops, dtype: DType, src: tuple[Value, ...] = (), arg=None) -> Value:
        v = Value(op, dtype, tuple(src), arg, self._id())
        self._blocks[-1].append(v)
        return v

    def _value(self, x: Operand, like: DType | None = None) -> Value:
        if isinstance(x, Value):
            return x
        if isinstance(x, bool | int | float | np.integer | np.floating):
            if like is None:
                like = f32 if isinstance(x, float | np.floating) else i32
            return self.const(x, like)
        raise BuildError(f"expected a Value or a number, got {type(x).__name__}")

    def _pair(self, a: Operand, b: Operand) -> tuple[Value, Value]:
        if not isinstance(a, Value) and not isinstance(b, Value):
            raise BuildError("at least one operand must be a Value")
        like = a.dtype if isinstance(a, Value) else b.dtype
        a, b = self._value(a, like), self._value(b, like)
        if a.dtype != b.dtype:
            raise BuildError(f"operand types differ: {a.dtype!r} vs {b.dtype!r}")
        return a, b

    # -- definitions -------------------------------------------------------------------------
    def arg(self, name: str, dtype: DType, *, noalias: bool = True, readonly: bool = False,
            align: int = 16) -> Value:
        """A kernel argument; arguments are in ABI order of the calls. Pointers must be GLOBAL.

        ``noalias`` (pointers) promises no other argument reaches the same buffer; ``align``
        is the alignment of the buffer base the launcher guarantees (hipMalloc: 256).
        """
        if any(a.name == name for a in self._args):
            raise BuildError(f"argument {name!r} declared twice")
        if dtype.is_ptr and dtype.addrspace != GLOBAL:
            raise BuildError(f"argument {name!r}: pointer arguments must be global")
        if dtype.is_vector or dtype in (void, i1):
            raise BuildError(f"argument {name!r}: type {dtype!r} not allowed")
        self._args.append(KernelArg(name, dtype, noalias and dtype.is_ptr,
                                    readonly and dtype.is_ptr, align if dtype.is_ptr else 0))
        v = Value(Ops.ARG, dtype, (), len(self._arg_values), self._id())
        self._arg_values.append(v)
        return v

    def lds(self, name: str, nbytes: int, elem: DType = i8, align: int = 16) -> Value:
        """A named LDS allocation of exactly ``nbytes``; returns ``ptr(elem, LDS)`` to its base."""
        if name in self._lds_values:
            raise BuildError(f"LDS allocation {name!r} declared twice")
        if nbytes <= 0:
            raise BuildError(f"LDS allocation {name!r}: {nbytes} bytes")
        self._lds.append(LdsAlloc(name, int(nbytes), align))
        v = Value(Ops.LDS_ALLOC, ptr(elem, LDS), (), name, self._id())
        self._lds_values[name] = v
        return v

    def const(self, value, dtype: DType) -> Value:
        """A constant; ints wrap to the type (stored signed), floats round to the type."""
        if dtype.is_vector:
            vals = tuple(value) if isinstance(value, list | tuple) else (value,) * dtype.count
            if len(vals) != dtype.count:
                raise BuildError(f"constant of {dtype!r} needs {dtype.count} elements")
            norm = tuple(self._scalar_const(x, dtype.base) for x in vals)
        else:
            norm = self._scalar_const(value, dtype)
        key = (dtype, norm)
        if key not in self._consts:
            self._consts[key] = Value(Ops.CONST, dtype, (), norm, self._id())
        return self._consts[key]

    @staticmethod
    def _scalar_const(x, dtype: DType):
        if dtype.is_int:
            if isinstance(x, float | np.floating) and not float(x).is_integer():
                raise BuildError(f"constant {x!r} is not an integer for {dtype!r}")
            return _wrap_int(int(x), dtype)
        if dtype.is_float:
            return round_to_dtype(float(x), dtype)
        raise BuildError(f"no constants of type {dtype!r}")

    def thread_id(self) -> Value:
        """Workitem id x (the block is 1-D): i32 in 0..block_size-1."""
        if ("tid",) not in self._hw:
            self._hw[("tid",)] = Value(Ops.THREAD_ID, i32, (), None, self._id())
        return self._hw[("tid",)]

    def workgroup_id(self, axis: int = 0) -> Value:
        """Workgroup id along ``axis`` (0=x, 1=y, 2=z): i32."""
        if axis not in (0, 1, 2):
            raise BuildError(f"workgroup axis {axis}")
        if ("wg", axis) not in self._hw:
            self._hw[("wg", axis)] = Value(Ops.WORKGROUP_ID, i32, (), axis, self._id())
        return self._hw[("wg", axis)]

    # -- ALU -----------------------------------------------------------------------------------
    def _binop(self, op: Ops, kind: str, a: Operand, b: Operand) -> Value:
        a, b = self._pair(a, b)
        ok = a.dtype.is_int if kind == "int" else a.dtype.is_float
        if not ok:
            raise BuildError(f"{op.name} needs {kind} operands, got {a.dtype!r}")
        if kind == "int" and not a.dtype.is_vector and a.dtype.bits > 1:
            folded = self._fold_int(op, a, b)
            if folded is not None:
                return folded
        return self._emit(op, a.dtype, (a, b))

    def _fold_int(self, op: Ops, a: Value, b: Value) -> Value | None:
        """Integer constant folding and identities (x+0, x*1, x*0, ...), with LLVM
        semantics; undefined cases (division by 0, over-wide shifts) are left to run time."""
        ca, cb = a.op is Ops.CONST, b.op is Ops.CONST
        if ca and cb:
            r = _fold_int_consts(op, a.arg, b.arg, a.dtype.bits)
            return None if r is None else self.const(r, a.dtype)
        if cb:
            x, c = a, b.arg
        elif ca and op in _COMMUTATIVE:
            x, c = b, a.arg
        else:
            return None
        if c == 0 and op in (Ops.ADD, Ops.SUB, Ops.OR, Ops.XOR, Ops.SHL, Ops.LSHR, Ops.ASHR):
            return x
        if c == 1 and op in (Ops.MUL, Ops.UDIV, Ops.SDIV):
            return x
        if c == 0 and op in (Ops.MUL, Ops.AND):
            return self.const(0, x.dtype)
        if c == -1 and op is Ops.AND:
            return x
        return None

    def not_(self, a: Value) -> Value:
        if not a.dtype.is_int:
            raise BuildError(f"NOT needs an integer, got {a.dtype!r}")
        return self._emit(Ops.NOT, a.dtype, (a,))

    def fneg(self, a: Value) -> Value:
        if not a.dtype.is_float:
            raise BuildError(f"FNEG needs a float, got {a.dtype!r}")
        return self._emit(Ops.FNEG, a.dtype, (a,))

    def icmp(self, pred: str, a: Operand, b: Operand) -> Value:
        """Integer compare; ``u*`` predicates compare as unsigned (0x80000000 > 0x7fffffff)."""
        if pred not in ICMP_PREDICATES:
            raise BuildError(f"icmp predicate {pred!r}; valid: {ICMP_PREDICATES}")
        a, b = self._pair(a, b)
        if not a.dtype.is_int:
            raise BuildError(f"icmp needs integers, got {a.dtype!r}")
        return self._emit(Ops.ICMP, i1.vec(a.dtype.count), (a, b), pred)

    def fcmp(self, pred: str, a: Operand, b: Operand) -> Value:
        if pred not in FCMP_PREDICATES:
            raise BuildError(f"fcmp predicate {pred!r}; valid: {FCMP_PREDICATES}")
        a, b = self._pair(a, b)
        if not a.dtype.is_float:
            raise BuildError(f"fcmp needs floats, got {a.dtype!r}")
        return self._emit(Ops.FCMP, i1.vec(a.dtype.count), (a, b), pred)

    def select(self, cond: Value, a: Operand, b: Operand) -> Value:
        """Per lane (and per element if ``cond`` is a vector): ``cond ? a : b``."""
        a, b = self._pair(a, b)
        if cond.dtype.scalar != "i1" or cond.dtype.count not in (1, a.dtype.count):
            raise BuildError(f"select condition {cond.dtype!r} for {a.dtype!r}")
        return self._emit(Ops.SELECT, a.dtype, (cond, a, b))

    def fma(self, a: Operand, b: Operand, c: Operand) -> Value:
        """a*b+c rounded once (llvm.fma)."""
        a, b = self._pair(a, b)
        c = self._value(c, a.dtype)
        if not a.dtype.is_float or c.dtype != a.dtype:
            raise BuildError(f"fma needs three floats of one type, got {a.dtype!r}, {c.dtype!r}")
        return self._emit(Ops.FMA, a.dtype, (a, b, c))

    # -- casts ---------------------------------------------------------------------------------
    def _cast(self, op: Ops, v: Value, to: DType) -> Value:
        to = to.vec(v.dtype.count) if to.count == 1 and v.dtype.count > 1 else to
        if to.count != v.dtype.count or not _CAST_RULES[op](v.dtype, to):
            raise BuildError(f"{op.name} from {v.dtype!r} to {to!r} is not allowed")
        if op is Ops.FPCAST and to == v.dtype:
            return v
        return self._emit(op, to, (v,))

    def fpcast(self, v: Value, to: DType) -> Value:
        """Between f16, bf16 and f32, round to nearest even (f16<->bf16 goes through f32)."""
        return self._cast(Ops.FPCAST, v, to)

    def sitofp(self, v: Value, to: DType) -> Value:
        return self._cast(Ops.SITOFP, v, to)

    def uitofp(self, v: Value, to: DType) -> Value:
        return self._cast(Ops.UITOFP, v, to)

    def fptosi(self, v: Value, to: DType) -> Value:
        return self._cast(Ops.FPTOSI, v, to)

    def fptoui(self, v: Value, to: DType) -> Value:
        return self._cast(Ops.FPTOUI, v, to)

    def trunc(self, v: Value, to: DType) -> Value:
        return self._cast(Ops.TRUNC, v, to)

    def zext(self, v: Value, to: DType) -> Value:
        return self._cast(Ops.ZEXT, v, to)

    def sext(self, v: Value, to: DType) -> Value:
        return self._cast(Ops.SEXT, v, to)

    def bitcast(self, v: Value, to: DType) -> Value:
        """Same total bits, non-pointer (e.g. <2 x f16> <-> i32, <8 x bf16> <-> <8 x i16>)."""
        if (v.dtype.is_ptr or to.is_ptr or "i1" in (v.dtype.scalar, to.scalar)
                or v.dtype.bits * v.dtype.count != to.bits * to.count):
            raise BuildError(f"BITCAST from {v.dtype!r} to {to!r} is not allowed")
        return v if to == v.dtype else self._emit(Ops.BITCAST, to, (v,))

    def ptr_cast(self, p: Value, elem: DType) -> Value:
        """The same address seen as a pointer to ``elem`` (no code)."""
        if not p.dtype.is_ptr:
            raise BuildError(f"ptr_cast of non-pointer {p.dtype!r}")
        to = ptr(elem, p.dtype.addrspace)
        return p if to == p.dtype else self._emit(Ops.PTR_CAST, to, (p,))

    def convert(self, v: Value, to: DType, signed: bool = True) -> Value:
        """Value conversion between any int/float types (picks trunc/ext/fp casts)."""
        s = v.dtype.base
        t = to.base
        if s == t:
            return v
        if s.is_float and t.is_float:
            return self.fpcast(v, t)
        if s.is_int and t.is_float:
            return self.sitofp(v, t) if signed else self.uitofp(v, t)
        if s.is_float and t.is_int:
            return self.fptosi(v, t) if signed else self.fptoui(v, t)
        if s.is_int and t.is_int:
            if t.bits < s.bits:
                return self.trunc(v, t)
            return self.sext(v, t) if signed and s.bits > 1 else self.zext(v, t)
        raise BuildError(f"convert from {v.dtype!r} to {to!r} is not allowed")

    # -- vectors -------------------------------------------------------------------------------
    def vec(self, *elems: Operand) -> Value:
        """A vector from scalars (all of one type)."""
        if len(elems) == 1:
            return self._value(elems[0])
        like = next((e.dtype for e in elems if isinstance(e, Value)), None)
        vals = tuple(self._value(e, like) for e in elems)
        base = vals[0].dtype
        if base.is_vector or base.is_ptr or any(x.dtype != base for x in vals):
            raise BuildError("vec() needs scalars of one type: "
                             + ", ".join(repr(x.dtype) for x in vals))
        return self._emit(Ops.VBUILD, base.vec(len(vals)), vals)

    def splat(self, x: Operand, n: int) -> Value:
        x = self._value(x)
        if x.op is Ops.CONST:
            return self.const(x.arg, x.dtype.vec(n))
        return self.vec(*([x] * n))

    def extract(self, v: Value, i: int) -> Value:
        if not v.dtype.is_vector:
            if i != 0:
                raise BuildError(f"extract {i} from scalar {v.dtype!r}")
            return v
        if not 0 <= i < v.dtype.count:
            raise BuildError(f"extract {i} from {v.dtype!r}")
        return self._emit(Ops.VEXTRACT, v.dtype.base, (v,), int(i))

    def insert(self, v: Value, x: Operand, i: int) -> Value:
        x = self._value(x, v.dtype.base)
        if not v.dtype.is_vector or x.dtype != v.dtype.base or not 0 <= i < v.dtype.count:
            raise BuildError(f"insert {x.dtype!r} at {i} into {v.dtype!r}")
        return self._emit(Ops.VINSERT, v.dtype, (v, x), int(i))

    def shuffle(self, a: Value, b: Value, mask: Sequence[int]) -> Value:
        """Elements ``mask[j]`` of ``a ++ b`` (a, b of one type; scalars count as 1-vectors)."""
        if a.dtype.base != b.dtype.base or a.dtype.count != b.dtype.count:
            raise BuildError(f"shuffle of {a.dtype!r} and {b.dtype!r}")
        mask = tuple(int(m) for m in mask)
        if not mask or any(not 0 <= m < 2 * a.dtype.count for m in mask):
            raise BuildError(f"shuffle mask {mask} out of range for {a.dtype!r}")
        if len(mask) == 1:
            src = a if mask[0] < a.dtype.count else b
            return self.extract(src, mask[0] % a.dtype.count)
        return self._emit(Ops.VSHUFFLE, a.dtype.base.vec(len(mask)), (a, b), mask)

    def concat(self, *parts: Value) -> Value:
        """Concatenate vectors/scalars of one element type."""
        if len(parts) == 1:
            return parts[0]
        base = parts[0].dtype.base
        if any(p.dtype.base != base for p in parts):
            raise BuildError("concat of different element types")
        if all(p.dtype.count == parts[0].dtype.count for p in parts) and len(parts) == 2:
            n = parts[0].dtype.count
            return self.shuffle(parts[0], parts[1], range(2 * n))
        elems = [self.extract(p, j) for p in parts for j in range(p.dtype.count)]
        return self.vec(*elems)

    def subvec(self, v: Value, start: int, n: int) -> Value:
        """Elements start..start+n-1 of ``v``."""
        if start < 0 or start + n > v.dtype.count or n < 1:
            raise BuildError(f"subvec({start}, {n}) of {v.dtype!r}")
        if n == 1:
            return self.extract(v, start)
        return self.shuffle(v, v, range(start, start + n))

    # -- memory --------------------------------------------------------------------------------
    def _pred(self, pred: Value | bool | None) -> tuple[Value, ...]:
        if pred is None or pred is True:
            return ()
        pred = self._value(pred, i1)
        if pred.dtype != i1:
            raise BuildError(f"predicate must be i1, got {pred.dtype!r}")
        return (pred,)

    def gep(self, p: Value, index: Operand) -> Value:
        """``p + index * sizeof(p.elem)``; index i32 or i64, signed."""
        if not p.dtype.is_ptr:
            raise BuildError(f"gep on non-pointer {p.dtype!r}")
        index = self._value(index, i32)
        if index.dtype not in (i32, i64):
            raise BuildError(f"gep index must be i32 or i64, got {index.dtype!r}")
        if index.op is Ops.CONST and index.arg == 0:
            return p
        return self._emit(Ops.GEP, p.dtype, (p, index))

    def load(self, p: Value, vec: int = 1, *, pred: Value | None = None,
             align: int | None = None) -> Value:
        """Load ``vec`` elements of ``p.elem`` (1 -> a scalar). Predicated off: no access, 0."""
        if not p.dtype.is_ptr:
            raise BuildError(f"load from non-pointer {p.dtype!r}")
        if vec not in (1, 2, 3, 4, 8, 16):
            raise BuildError(f"load vector width {vec}")
        dt = p.dtype.elem.vec(vec)
        return self._emit(Ops.LOAD, dt, (p, *self._pred(pred)), self._align(align, dt))

    def store(self, p: Value, value: Operand, *, pred: Value | None = None,
              align: int | None = None) -> None:
        """Store ``value`` (scalar or vector of ``p.elem``) at ``p``."""
        if not p.dtype.is_ptr:
            raise BuildError(f"store to non-pointer {p.dtype!r}")
        value = self._value(value, p.dtype.elem)
        if value.dtype.base != p.dtype.elem:
            raise BuildError(f"store of {value.dtype!r} through {p.dtype!r}")
        self._emit(Ops.STORE, void, (p, value, *self._pred(pred)), self._align(align, value.dtype))

    @staticmethod
    def _align(align: int | None, dt: DType) -> int:
        a = dt.itemsize if align is None else int(align)
        if a < 1 or a & (a - 1):
            raise BuildError(f"alignment {a} is not a power of two")
        return a

    def bounded_load(self, p: Value, byte_off: Operand, num_bytes: Value, vec: int = 1, *,  # noqa: PLR0913 - an IR op: its operands, width, alignment
                     align: int | None = None, base: Value | None = None) -> Value:
        """Load ``vec`` elements at byte ``byte_off`` of a record that starts at byte ``base``
        (default 0) of the kernel argument ``p``, with the range check in the access: the
        bytes when ``byte_off + size <= num_bytes`` (unsigned), zeros when ``byte_off >=
        num_bytes`` (an offset of 0x80000000 is always past a buffer that ``serves``
        admits). On AMD the (p + base, num_bytes) pair is one buffer resource in SGPRs, so
        ``base`` and ``num_bytes`` must be equal over the workgroup (a kernel argument, or a
        value of the workgroup's ids and loop index; the emulator checks it): a record that
        moves with the K tile turns the tile's row bound into the hardware's range check
        and leaves the per-lane offset loop-invariant."""
        if not (p.dtype.is_ptr and p.dtype.addrspace == GLOBAL and p.op is Ops.ARG):
            raise BuildError(f"bounded_load base must be a global pointer argument, got {p!r}")
        if not (isinstance(num_bytes, Value) and num_bytes.dtype == i32):
            raise BuildError("bounded_load num_bytes must be an i32 value")
        byte_off = self._value(byte_off, i32)
        if byte_off.dtype != i32:
            raise BuildError(f"bounded_load offset must be i32, got {byte_off.dtype!r}")
        if base is not None and not (isinstance(base, Value) and base.dtype == i32):
            raise BuildError("bounded_load base offset must be an i32 value")
        dt = p.dtype.elem.vec(vec) if vec > 1 else p.dtype.elem
        if dt.nbytes not in _BOUNDED_BYTES:
            raise BuildError(f"bounded_load of {dt.nbytes} bytes (one of {_BOUNDED_BYTES})")
        srcs = (p, byte_off, num_bytes) if base is None else (p, byte_off, num_bytes, base)
        return self._emit(Ops.BOUNDED_LOAD, dt, srcs, self._align(align, dt))

    def lds_load_tr(self, p: Value, read: str) -> Value:
        """A transposing LDS read (``mma.TRANSPOSED_READS[read]``: gfx1250's
        ds_load_tr16_b128, NVIDIA's ldmatrix .x4 .trans): each lane gives the LDS address of
        a 16-byte row of 8 16-bit elements and receives 8 elements of the rows the lanes of
        its transpose group addressed, as the read's lane map says. A wave op: all lanes of
        the wave together, addresses 16-byte aligned (the emulator checks both)."""
        if not (p.dtype.is_ptr and p.dtype.addrspace == LDS and p.dtype.elem.bits == 16):
            raise BuildError(f"lds_load_tr needs an LDS pointer to 16-bit elements, got {p!r}")
        if read not in _mma.TRANSPOSED_READS:
            raise BuildError(f"unknown transposing read {read!r}; valid: "
                             f"{', '.join(_mma.TRANSPOSED_READS)}")
        return self._emit(Ops.LDS_LOAD_TR, p.dtype.elem.vec(8), (p,), read)

    def atomic_add(self, p: Value, value: Value, *, pred: Value | None = None) -> None:
        """``*p += value`` atomically (agent scope, monotonic, no return).

        f32 through ptr(f32); <2 x f16> through ptr(f16); <2 x bf16> through ptr(bf16).
        """
        ok = (p.dtype.is_ptr and p.dtype.addrspace == GLOBAL
              and value.dtype in (f32, f16.vec(2), bf16.vec(2))
              and value.dtype.base == p.dtype.elem)
        if not ok:
            raise BuildError(f"atomic_add of {value.dtype!r} through {p.dtype!r}")
        self._emit(Ops.ATOMIC_ADD, void, (p, value, *self._pred(pred)))

    def async_copy(self, src: Value, dst: Value, nbytes: int, *, pred: Value | None = None):
        """gfx1250: copy ``nbytes`` (4|8|16) per lane from global ``src`` to LDS ``dst``.

        The data lands in LDS at some point before the ``async_wait`` that retires it.
        """
        self._check_async(src, dst, nbytes)
        self._emit(Ops.ASYNC_COPY, void, (src, dst, *self._pred(pred)), int(nbytes))

    @staticmethod
    def _check_async(src: Value, dst: Value, nbytes: int) -> None:
        if not (src.dtype.is_ptr and src.dtype.addrspace == GLOBAL):
            raise BuildError(f"async_copy source must be a global pointer, got {src.dtype!r}")
        if not (dst.dtype.is_ptr and dst.dtype.addrspace == LDS):
            raise BuildError(f"async_copy destination must be an LDS pointer, got {dst.dtype!r}")
        if nbytes not in (4, 8, 16):
            raise BuildError(f"async_copy of {nbytes} bytes (4, 8 or 16)")

    def async_copy_zfill(self, src: Value, dst: Value, nbytes: int, keep: Value) -> None:
        """NVIDIA: copy ``nbytes`` (4|8|16) per lane from global ``src`` to LDS ``dst`` where
        ``keep``; elsewhere ``nbytes`` zeros land and ``src`` is not read (cp.async's
        src-size 0). Lands before this lane's own ``async_wait`` retires it."""
        self._check_async(src, dst, nbytes)
        if keep.dtype != i1:
            raise BuildError(f"async_copy_zfill keep must be i1, got {keep.dtype!r}")
        self._emit(Ops.ASYNC_COPY_ZFILL, void, (src, dst, keep), int(nbytes))

    def async_wait(self, n: int = 0) -> None:
        """Wait until at most ``n`` async copies issued by this wave (``async_copy``) or
        this lane (``async_copy_zfill``) are in flight."""
        if not 0 <= n < 64:
            raise BuildError(f"async_wait({n})")
        self._emit(Ops.ASYNC_WAIT, void, (), int(n))

    def async_commit(self) -> None:
        """NVIDIA: close this lane's open group of ``async_copy_zfill`` copies
        (cp.async.commit_group); a commit with no copy makes an empty group."""
        self._emit(Ops.ASYNC_COMMIT, void)

    def async_wait_group(self, n: int) -> None:
        """NVIDIA: wait until at most ``n`` of this lane's committed groups are pending
        (cp.async.wait_group n): every older group has landed; open copies are not waited
        for."""
        if not 0 <= n < 64:
            raise BuildError(f"async_wait_group({n})")
        self._emit(Ops.ASYNC_WAIT_GROUP, void, (), int(n))

    def barrier(self) -> None:
        """Workgroup barrier; LDS writes before it are visible to every lane after it."""
        self._emit(Ops.BARRIER, void)

    # -- matrix --------------------------------------------------------------------------------
    def mma(self, form: str, a: Value, b: Value, c: Value) -> Value:
        """D = C + A B for one wave; fragments in the lane layout ``mma.layout(form)``."""
        try:
            lay = _mma.layout(form)
        except KeyError as e:
            raise BuildError(str(e)) from None
        ab = a.dtype.base
        if (ab not in (f16, bf16) or a.dtype != ab.vec(lay.ab_elems) or b.dtype != a.dtype
                or c.dtype != f32.vec(lay.c_elems)):
            raise BuildError(f"mma {form}: needs A, B <{lay.ab_elems} x f16|bf16> and C "
                             f"<{lay.c_elems} x f32>, got {a.dtype!r}, {b.dtype!r}, {c.dtype!r}")
        if self.block_size % lay.wave_size:
            raise BuildError(f"mma {form}: block_size {self.block_size} is not a multiple "
                             f"of the wave size {lay.wave_size}")
        return self._emit(Ops.MMA, c.dtype, (a, b, c), form)

    # -- control -------------------------------------------------------------------------------
    @contextmanager
    def for_(self, start: Operand, stop: Operand, step: Operand = 1,
             carried: Sequence[Value] = ()):
        """``for index in range(start, stop, step)`` (step > 0); see ``Loop``."""
        like = next((x.dtype for x in (start, stop, step) if isinstance(x, Value)), i32)
        start, stop, step = (self._value(x, like) for x in (start, stop, step))
        if any(x.dtype != like or like not in (i32, i64) for x in (start, stop, step)):
            raise BuildError("loop bounds must all be i32 or all i64")
        if step.op is Ops.CONST and step.arg <= 0:
            raise BuildError(f"loop step must be positive, got {step.arg}")
        inits = tuple(self._value(c) for c in carried)
        lid = self._id()
        index = Value(Ops.LOOP_INDEX, like, (), lid, self._id())
        cvals = tuple(Value(Ops.LOOP_CARRIED, c.dtype, (), (lid, s), self._id())
                      for s, c in enumerate(inits))
        loop = Loop(index, cvals)
        self._blocks.append([])
        try:
            yield loop
        finally:
            body = self._blocks.pop()
        yields = loop._yields if loop._yields is not None else ()
        if [y.dtype for y in yields] != [c.dtype for c in inits]:
            raise BuildError(f"loop yields {[y.dtype for y in yields]} for carried "
                             f"{[c.dtype for c in inits]}")
        region = ForRegion(lid, index, cvals, tuple(body), tuple(yields))
        node = self._emit(Ops.FOR, void, (start, stop, step, *inits), region)
        loop.results = tuple(self._emit(Ops.LOOP_RESULT, c.dtype, (node,), s)
                             for s, c in enumerate(inits))

    def loop(self, start: Operand, stop: Operand, step: Operand, inits: Sequence[Value],
             body: Callable[..., Sequence[Value] | Value | None]) -> tuple[Value, ...]:
        """Callback form of ``for_``: ``body(index, *carried)`` returns the next carried values."""
        with self.for_(start, stop, step, inits) as lp:
            out = body(lp.index, *lp.carried)
            lp.yield_(*_as_tuple(out))
        return lp.results

    def _if_pred(self, pred: Value) -> Value:
        if not isinstance(pred, Value) or pred.dtype != i1:
            raise BuildError(f"if predicate must be an i1 Value, got {pred!r}")
        return pred

    @contextmanager
    def if_(self, pred: Value, uniform: int = 0):
        """Lanes where ``pred`` (i1) is true run the body; no values leave it.

        ``uniform`` (the wave size) promises ``pred`` is equal over each aligned group of
        that many lanes: the lowering branches on one lane's value (no exec-mask branch)
        and the emulator checks the promise."""
        pred = self._if_pred(pred)
        if uniform < 0 or uniform & (uniform - 1):
            raise BuildError(f"if_ uniform={uniform}: 0 or a power of two lane count")
        self._blocks.append([])
        try:
            yield
        finally:
            then = self._blocks.pop()
        self._emit(Ops.IF, void, (pred,), IfRegion(self._id(), tuple(then), (), (), (),
                                                   int(uniform)))

    def if_else(self, pred: Value, then_fn: Callable[[], Sequence[Value] | Value | None],
                else_fn: Callable[[], Sequence[Value] | Value | None] | None = None
                ) -> tuple[Value, ...]:
        """Per-lane if/else; each function builds its branch and returns the values it
        yields (same dtypes on both sides). Returns the merged values, one per slot."""
        pred = self._if_pred(pred)
        self._blocks.append([])
        try:
            then_y = _as_tuple(then_fn())
        finally:
            then = self._blocks.pop()
        self._blocks.append([])
        try:
            else_y = _as_tuple(else_fn()) if else_fn is not None else ()
        finally:
            else_ = self._blocks.pop()
        then_y = tuple(self._value(v) for v in then_y)
        else_y = tuple(self._value(v, t.dtype) for v, t in zip(else_y, then_y, strict=False))
        if [v.dtype for v in then_y] != [v.dtype for v in else_y]:
            raise BuildError(f"if branches yield {[v.dtype for v in then_y]} vs "
                             f"{[v.dtype for v in else_y]}")
        node = self._emit(Ops.IF, void, (pred,),
                          IfRegion(self._id(), tuple(then), tuple(else_), then_y, else_y))
        return tuple(self._emit(Ops.IF_RESULT, v.dtype, (node,), s) for s, v in enumerate(then_y))

    def finish(self, min_blocks: int = 0) -> KernelDef:
        """The finished kernel, verified (``verify.verify``); ``min_blocks``:
        ``KernelDef.min_blocks``."""
        if len(self._blocks) != 1:
            raise BuildError("finish() inside an open region")
        kd = KernelDef(self.name, tuple(self._args), self.block_size, tuple(self._lds),
                       tuple(self._blocks[0]), tuple(self._arg_values), min_blocks)
        from wgradcache.kernel.verify import verify
        verify(kd)
        return kd


def _as_tuple(out) -> tuple[Value, ...]:
    if out is None:
        return ()
    if isinstance(out, Value):
        return (out,)
    return tuple(out)


# bytes per lane of a bounded load: what one buffer load moves (b8 .. b128)
_BOUNDED_BYTES = (1, 2, 4, 8, 12, 16)

_COMMUTATIVE = frozenset({Ops.ADD, Ops.MUL, Ops.AND, Ops.OR, Ops.XOR})


def _fold_int_consts(op: Ops, a: int, b: int, bits: int) -> int | None:
    """``a op b`` on two's-complement ``bits``-bit constants (stored signed); None when LLVM
    leaves the result undefined (division by zero, INT_MIN / -1, shift >= bits)."""
    mask = (1 << bits) - 1
    ua, ub = a & mask, b & mask
    if op in (Ops.UDIV, Ops.UREM, Ops.SDIV, Ops.SREM) and b == 0:
        return None
    if op in (Ops.SHL, Ops.LSHR, Ops.ASHR) and ub >= bits:
        return None
    if op in (Ops.SDIV, Ops.SREM) and a == -(1 << (bits - 1)) and b == -1:
        return None
    if op in (Ops.SDIV, Ops.SREM):
        q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)  # truncating, as LLVM sdiv
        return q if op is Ops.SDIV else a - b * q
    table = {
        Ops.ADD: lambda: a + b, Ops.SUB: lambda: a - b, Ops.MUL: lambda: a * b,
        Ops.UDIV: lambda: ua // ub, Ops.UREM: lambda: ua % ub,
        Ops.SHL: lambda: a << ub, Ops.LSHR: lambda: ua >> ub, Ops.ASHR: lambda: a >> ub,
        Ops.AND: lambda: a & b, Ops.OR: lambda: a | b, Ops.XOR: lambda: a ^ b,
        Ops.SMIN: lambda: min(a, b), Ops.SMAX: lambda: max(a, b),
        Ops.UMIN: lambda: min(ua, ub), Ops.UMAX: lambda: max(ua, ub),
    }
    return table[op]()


def _make_binop(name: str, op: Ops, kind: str):
    def method(self: KernelBuilder, a: Operand, b: Operand) -> Value:
        return self._binop(op, kind, a, b)
    method.__name__ = name
    method.__doc__ = f"{op.name} ({kind}); LLVM semantics (see emulate for each choice)."
    return method


for _name, (_op, _kind) in _BINOPS.items():
    setattr(KernelBuilder, _name, _make_binop(_name, _op, _kind))
