"""The kernel IR: types, the op enum, op groups, SSA values and the KernelDef.

Kernels are written once against this IR (DESIGN §5) and read by two consumers, the LLVM
lowering (``lower_llvm``) and the numpy SIMT emulator (``emulate``). Both dispatch on the op
groups below, so a new op joins a group once and every consumer sees it.

Shape (after tinygrad's ``UOp``): a ``Value`` is a frozen node ``(op, dtype, src, arg)``
plus a builder-assigned ``id`` (its SSA name). Unlike tinygrad, nodes are *not*
hash-consed: two loads of one address at different times are different values, so identity
(``eq=False``) is the equality. Control flow is structured: a ``FOR`` or ``IF`` node carries
its regions in ``arg`` (``ForRegion`` / ``IfRegion``), each region a tuple of statements
in program order, so both consumers walk them 1:1 (phi loops and ``if_then`` in LLVM, an
exec-mask stack in the emulator). Results of a region are projection nodes
(``LOOP_RESULT`` / ``IF_RESULT``) that follow the region node in its block.

Values that are defined for the whole kernel (``GLOBAL_DEFS``: arguments, LDS allocations,
constants, hardware ids) are not statements; every other value is a statement of exactly
one block and may only be used by later statements of that block or of blocks nested in it
(``verify.verify`` checks this).
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DType", "i1", "i8", "i16", "i32", "i64", "f16", "bf16", "f32", "void",
    "ptr", "GLOBAL", "LDS", "Ops", "GroupOp", "Value", "ForRegion", "IfRegion",
    "KernelArg", "LdsAlloc", "KernelDef", "ICMP_PREDICATES", "FCMP_PREDICATES",
    "format_kernel",
]

GLOBAL = 1  # LLVM AMDGPU address space of global memory
LDS = 3  # LLVM AMDGPU address space of LDS (local / group segment)

_SCALAR_BITS = {"i1": 1, "i8": 8, "i16": 16, "i32": 32, "i64": 64,
                "f16": 16, "bf16": 16, "f32": 32, "ptr": 64, "void": 0}


class _Interned(type):
    """``DType(...)`` returns one object per distinct value (tinygrad interns its dtypes
    too): equality and hashing are then identity, at C speed. Comparing dtypes field by
    field was the largest single cost of verifying a kernel (~70k values per kernel)."""

    def __call__(cls, scalar: str, count: int = 1, elem: DType | None = None,
                 addrspace: int = 0):
        key = (scalar, count, elem, addrspace)
        found = cls._instances.get(key)
        if found is None:  # setdefault: two threads racing here still share one object
            found = cls._instances.setdefault(key, super().__call__(scalar, count, elem,
                                                                    addrspace))
        return found


@dataclass(frozen=True, eq=False)
class DType(metaclass=_Interned):
    """A scalar, a vector of ``count`` scalars, or a pointer.

    Pointers are opaque in LLVM (``ptr addrspace(N)``) but carry a pointee element type
    here: ``gep`` scales by it and ``load`` returns it, and the emulator needs it to read
    bytes. ``ptr_cast`` changes it without emitting anything.

    Interned (``_Interned``): equal dtypes are the same object, also after pickling.
    """

    scalar: str
    count: int = 1
    elem: DType | None = None  # pointee (scalar) type of a pointer
    addrspace: int = 0

    _instances = {}  # the intern table (no annotation: a class attribute, not a field)

    def __reduce__(self):
        return DType, (self.scalar, self.count, self.elem, self.addrspace)

    # Derived once per interned dtype (read ~150k times per kernel built).
    base: DType = field(init=False, repr=False)  # element type of a vector; self for a scalar
    is_vector: bool = field(init=False, repr=False)
    is_int: bool = field(init=False, repr=False)
    is_float: bool = field(init=False, repr=False)
    is_ptr: bool = field(init=False, repr=False)
    bits: int = field(init=False, repr=False)  # of one element
    itemsize: int = field(init=False, repr=False)  # bytes of one element (i1: a byte)
    nbytes: int = field(init=False, repr=False)

    def __post_init__(self):
        assert self.scalar in _SCALAR_BITS, self.scalar
        assert self.count >= 1
        assert (self.scalar == "ptr") == (self.elem is not None)
        assert self.scalar != "ptr" or self.count == 1, "no vectors of pointers"
        bits = _SCALAR_BITS[self.scalar]
        itemsize = max(1, bits // 8)
        derived = {
            "base": DType(self.scalar) if self.count > 1 else self,
            "is_vector": self.count > 1, "is_int": self.scalar[0] == "i",
            "is_float": self.scalar in ("f16", "bf16", "f32"), "is_ptr": self.scalar == "ptr",
            "bits": bits, "itemsize": itemsize, "nbytes": itemsize * self.count,
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)

    def vec(self, n: int) -> DType:
        assert self.count == 1 and self.scalar not in ("ptr", "void"), self
        return DType(self.scalar, n) if n > 1 else self

    def __repr__(self) -> str:
        if self.is_ptr:
            return f"ptr<{self.elem!r}, as{self.addrspace}>"
        return f"<{self.count} x {self.scalar}>" if self.count > 1 else self.scalar


i1, i8, i16, i32, i64 = (DType(n) for n in ("i1", "i8", "i16", "i32", "i64"))
f16, bf16, f32 = DType("f16"), DType("bf16"), DType("f32")
void = DType("void")


def ptr(elem: DType, addrspace: int = GLOBAL) -> DType:
    """Pointer to ``elem`` (a scalar type) in ``addrspace`` (GLOBAL=1 or LDS=3)."""
    assert not elem.is_vector and not elem.is_ptr and elem != void, elem
    assert addrspace in (GLOBAL, LDS), addrspace
    return DType("ptr", 1, elem, addrspace)


class Ops(enum.Enum):
    """Every op of the IR, by section. ``arg`` and ``src`` per op are in the comments."""

    # Members are singletons compared by identity: hash them by identity too (C-level),
    # not by Enum's Python-level hash of the name, which was ~5 % of building a kernel.
    __hash__ = object.__hash__

    # ** 1 -- kernel-wide definitions (not statements) **
    ARG = enum.auto()  # arg=index into KernelDef.args
    LDS_ALLOC = enum.auto()  # arg=name of a KernelDef.lds allocation; dtype ptr(.., LDS)
    CONST = enum.auto()  # arg=int | float | tuple (vector), already cast to the dtype's domain
    THREAD_ID = enum.auto()  # workitem id x (blocks are 1-D), i32
    WORKGROUP_ID = enum.auto()  # arg=axis 0|1|2, i32

    # ** 2 -- region-bound definitions **
    LOOP_INDEX = enum.auto()  # the induction variable of a FOR; arg=loop id
    LOOP_CARRIED = enum.auto()  # a loop-carried value inside the body; arg=(loop id, slot)
    LOOP_RESULT = enum.auto()  # src=(FOR,), arg=slot: the carried value after the loop
    IF_RESULT = enum.auto()  # src=(IF,), arg=slot

    # ** 3 -- unary ALU **
    NOT = enum.auto()  # bitwise not (xor -1)
    FNEG = enum.auto()

    # ** 4 -- binary ALU, integer (LLVM semantics; signedness is in the op, not the type) **
    ADD = enum.auto()
    SUB = enum.auto()
    MUL = enum.auto()
    UDIV = enum.auto()
    UREM = enum.auto()
    SDIV = enum.auto()  # truncates toward zero (LLVM sdiv)
    SREM = enum.auto()  # sign of the dividend (LLVM srem, C %)
    SHL = enum.auto()
    LSHR = enum.auto()
    ASHR = enum.auto()
    AND = enum.auto()
    OR = enum.auto()
    XOR = enum.auto()
    SMIN = enum.auto()
    SMAX = enum.auto()
    UMIN = enum.auto()
    UMAX = enum.auto()

    # ** 5 -- binary ALU, float (IEEE, round to nearest even in the value's type) **
    FADD = enum.auto()
    FSUB = enum.auto()
    FMUL = enum.auto()
    FDIV = enum.auto()
    FMIN = enum.auto()  # llvm.minnum
    FMAX = enum.auto()  # llvm.maxnum

    # ** 6 -- comparisons (result i1, or <n x i1> for vectors); arg=predicate **
    ICMP = enum.auto()  # arg in ICMP_PREDICATES (incl. unsigned ult/ule/ugt/uge)
    FCMP = enum.auto()  # arg in FCMP_PREDICATES

    # ** 7 -- ternary ALU **
    FMA = enum.auto()  # llvm.fma: a*b+c with one rounding
    SELECT = enum.auto()  # src=(cond, a, b)

    # ** 8 -- casts (arg unused; dtype is the target type) **
    FPCAST = enum.auto()  # f16|bf16|f32 -> f16|bf16|f32, round to nearest even
    SITOFP = enum.auto()
    UITOFP = enum.auto()
    FPTOSI = enum.auto()
    FPTOUI = enum.auto()
    TRUNC = enum.auto()
    ZEXT = enum.auto()
    SEXT = enum.auto()
    BITCAST = enum.auto()  # same total bits, e.g. <2 x f16> <-> i32, bf16 <-> i16
    PTR_CAST = enum.auto()  # change a pointer's element type (no code)

    # ** 9 -- vectors **
    VBUILD = enum.auto()  # src=elements
    VEXTRACT = enum.auto()  # src=(vec,), arg=index
    VINSERT = enum.auto()  # src=(vec, elem), arg=index
    VSHUFFLE = enum.auto()  # src=(a, b), arg=tuple of indices into a ++ b

    # ** 10 -- memory **
    GEP = enum.auto()  # src=(ptr, index): ptr + index * sizeof(elem)
    LOAD = enum.auto()  # src=(ptr[, pred]), arg=align; dtype elem or <n x elem>
    STORE = enum.auto()  # src=(ptr, value[, pred]), arg=align
    ATOMIC_ADD = enum.auto()  # src=(gptr, value[, pred]); f32, <2 x f16>, <2 x bf16>; no result
    ASYNC_COPY = enum.auto()  # src=(gptr, lds_ptr[, pred]), arg=bytes (4|8|16)
    # src=(gptr, lds_ptr, keep), arg=bytes (4|8|16): where keep, the copy; elsewhere bytes
    # zeros land and nothing is read (NVIDIA cp.async with src-size 0). Completion is per
    # lane: only the issuing lane's own ASYNC_WAIT retires it (cp.async groups are per
    # thread), where ASYNC_COPY's completes per wave (gfx1250's ASYNCcnt)
    ASYNC_COPY_ZFILL = enum.auto()
    # arg=n: wait until <= n async copies of this wave (ASYNC_COPY) or of this lane
    # (ASYNC_COPY_ZFILL) are in flight
    ASYNC_WAIT = enum.auto()
    # close this lane's open group of ASYNC_COPY_ZFILL copies (cp.async.commit_group)
    ASYNC_COMMIT = enum.auto()
    # arg=n: wait until <= n of this lane's committed ASYNC_COPY_ZFILL groups are pending
    # (cp.async.wait_group n); copies not yet committed are not waited for
    ASYNC_WAIT_GROUP = enum.auto()
    BARRIER = enum.auto()  # workgroup barrier with LDS release/acquire
    # src=(gptr, byte_off, num_bytes), arg=align; gptr and num_bytes kernel arguments (ARG),
    # byte_off i32. Per lane, as a buffer resource reads (kernel/emulate.py cites the
    # rule): bytes [off, off + size) when off + size <= num_bytes, unsigned; zeros when
    # off >= num_bytes; an access across num_bytes is an error (chip-dependent). No branch:
    # an invalid element gets an offset past the range instead of a predicate.
    BOUNDED_LOAD = enum.auto()
    # src=(lds_ptr,), arg=read name (kernel/mma.TRANSPOSED_READS: gfx1250 ds_load_tr16_b128,
    # NVIDIA ldmatrix .x4 .trans); a wave op (every lane active); dtype <8 x 16-bit>. Each
    # lane addresses one 16-byte row and receives, slot by slot, elements of the rows
    # other lanes addressed (8x8 transposes, the read's lane map); addresses 16-byte aligned
    LDS_LOAD_TR = enum.auto()

    # ** 11 -- matrix **
    MMA = enum.auto()  # src=(a, b, c), arg=form ("gfx1250"|"gfx12"|"gfx11"|"mfma"|"mfma_k32")

    # ** 12 -- structured control **
    FOR = enum.auto()  # src=(start, stop, step, *inits), arg=ForRegion
    IF = enum.auto()  # src=(pred,), arg=IfRegion


class GroupOp:
    """Op groups read by the builder, the verifier, the lowering and the emulator."""

    GlobalDefs = frozenset({Ops.ARG, Ops.LDS_ALLOC, Ops.CONST, Ops.THREAD_ID, Ops.WORKGROUP_ID})
    RegionDefs = frozenset({Ops.LOOP_INDEX, Ops.LOOP_CARRIED})
    Unary = frozenset({Ops.NOT, Ops.FNEG})
    IntBinary = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.UDIV, Ops.UREM, Ops.SDIV, Ops.SREM,
                           Ops.SHL, Ops.LSHR, Ops.ASHR, Ops.AND, Ops.OR, Ops.XOR,
                           Ops.SMIN, Ops.SMAX, Ops.UMIN, Ops.UMAX})
    FloatBinary = frozenset({Ops.FADD, Ops.FSUB, Ops.FMUL, Ops.FDIV, Ops.FMIN, Ops.FMAX})
    Binary = IntBinary | FloatBinary
    Comparison = frozenset({Ops.ICMP, Ops.FCMP})
    Ternary = frozenset({Ops.FMA, Ops.SELECT})
    ALU = Unary | Binary | Comparison | Ternary
    Cast = frozenset({Ops.FPCAST, Ops.SITOFP, Ops.UITOFP, Ops.FPTOSI, Ops.FPTOUI, Ops.TRUNC,
                      Ops.ZEXT, Ops.SEXT, Ops.BITCAST, Ops.PTR_CAST})
    Vector = frozenset({Ops.VBUILD, Ops.VEXTRACT, Ops.VINSERT, Ops.VSHUFFLE})
    Memory = frozenset({Ops.LOAD, Ops.STORE, Ops.ATOMIC_ADD, Ops.ASYNC_COPY,
                        Ops.ASYNC_COPY_ZFILL})
    Sync = frozenset({Ops.ASYNC_WAIT, Ops.ASYNC_COMMIT, Ops.ASYNC_WAIT_GROUP, Ops.BARRIER})
    # ops that take an optional trailing i1 predicate (false: no access, a load yields 0)
    Predicated = frozenset({Ops.LOAD, Ops.STORE, Ops.ATOMIC_ADD, Ops.ASYNC_COPY})


ICMP_PREDICATES = ("eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge")
# ordered compares are false when either side is NaN; "une" is true then (LLVM fcmp)
FCMP_PREDICATES = ("oeq", "one", "olt", "ole", "ogt", "oge", "une", "ord", "uno")


@dataclass(frozen=True, eq=False)
class Value:
    """One SSA value: ``(op, dtype, src, arg)`` and its SSA number ``id``.

    Equality is identity (``eq=False``): values are created once by the builder. ``key`` is
    the structural hash (op, dtype, arg and the sources' keys) for callers that want one,
    memoised per node: a DAG shares its nodes, so hashing each source afresh would cost
    2^depth hashes for a chain that uses each value twice.
    """

    op: Ops
    dtype: DType
    src: tuple[Value, ...]
    arg: Any
    id: int

    def __repr__(self) -> str:
        return f"%{self.id}:{self.dtype!r}={self.op.name}"

    @property
    def key(self) -> bytes:
        cached = self.__dict__.get("_key")
        return cached if cached is not None else _structural_key(self)


def _structural_key(root: Value) -> bytes:
    """Fill in ``_key`` for ``root`` and every source without one, sources first.

    An explicit stack rather than recursion: a kernel's DAG can be deeper than Python's
    recursion limit. Each node is hashed once; two threads racing store the same bytes.
    """
    stack = [root]
    while stack:
        v = stack[-1]
        if "_key" in v.__dict__:
            stack.pop()
            continue
        pending = [s for s in v.src if "_key" not in s.__dict__]
        if pending:
            stack.extend(pending)
            continue
        h = hashlib.sha256(f"{v.op.name}|{v.dtype!r}|{_arg_key(v.arg)}".encode())
        for s in v.src:
            h.update(s.__dict__["_key"])
        v.__dict__["_key"] = h.digest()  # not a field: frozen fields stay as built
        stack.pop()
    return root.__dict__["_key"]


def _arg_key(arg: Any) -> str:
    if isinstance(arg, ForRegion | IfRegion):
        return repr(arg.id)
    return repr(arg)


@dataclass(frozen=True, eq=False)
class ForRegion:
    """``for index in range(start, stop, step)`` with loop-carried values.

    ``step`` must be positive: the loop runs while ``index < stop`` (signed). ``carried``
    are the LOOP_CARRIED values seen by the body; ``yields`` are the next iteration's
    values (one per carried slot); the FOR's LOOP_RESULTs are the carried values at exit.
    """

    id: int
    index: Value
    carried: tuple[Value, ...]
    body: tuple[Value, ...]
    yields: tuple[Value, ...]


@dataclass(frozen=True, eq=False)
class IfRegion:
    """Per-lane ``if``: lanes whose predicate is false skip ``then`` and run ``else_``.

    ``then_yields[i]`` / ``else_yields[i]`` become IF_RESULT slot i (a select per lane).
    ``uniform``: 0, or a lane count (the wave size) over whose aligned groups the predicate
    is promised equal: the lowering then branches on one lane's value (a scalar branch, no
    exec-mask manipulation) and the emulator checks the promise.
    """

    id: int
    then: tuple[Value, ...]
    else_: tuple[Value, ...]
    then_yields: tuple[Value, ...]
    else_yields: tuple[Value, ...]
    uniform: int = 0


@dataclass(frozen=True)
class KernelArg:
    """One kernel argument, in ABI order. Pointers: ``noalias`` promises the buffer is
    reached through no other argument; ``align`` is the byte alignment of the base."""

    name: str
    dtype: DType
    noalias: bool = True
    readonly: bool = False
    align: int = 16


@dataclass(frozen=True)
class LdsAlloc:
    """One named LDS allocation: exactly ``nbytes`` bytes (the code object's LDS is the sum)."""

    name: str
    nbytes: int
    align: int = 16


@dataclass(frozen=True, eq=False)
class KernelDef:
    """A whole kernel: symbol, ABI (args in order), block size, LDS allocations, body."""

    name: str
    args: tuple[KernelArg, ...]
    block_size: int
    lds: tuple[LdsAlloc, ...]
    body: tuple[Value, ...]
    arg_values: tuple[Value, ...] = field(default=())  # the ARG Value of each arg, in order
    # the fewest blocks of this kernel one SM must hold at once (0: not said, the
    # compiler's own choice): NVIDIA's .minnctapersm, which bounds ptxas's register budget
    # by 65536 / (block x min_blocks) instead of its occupancy heuristic; AMD ignores it
    min_blocks: int = 0

    @property
    def lds_bytes(self) -> int:
        return sum(a.nbytes for a in self.lds)

    def lds_alloc(self, name: str) -> LdsAlloc:
        for a in self.lds:
            if a.name == name:
                return a
        raise KeyError(f"kernel {self.name}: no LDS allocation {name!r}")


def walk(block: tuple[Value, ...]):
    """Every statement of ``block`` and of the regions nested in it, in program order."""
    for v in block:
        yield v
        if v.op is Ops.FOR:
            yield from walk(v.arg.body)
        elif v.op is Ops.IF:
            yield from walk(v.arg.then)
            yield from walk(v.arg.else_)


def format_kernel(kd: KernelDef) -> str:
    """A readable listing of the kernel (for debugging and error messages)."""
    lines = [f"kernel {kd.name}(" + ", ".join(f"{a.name}: {a.dtype!r}" for a in kd.args)
             + f") block={kd.block_size} lds=" + ",".join(f"{a.name}[{a.nbytes}]" for a in kd.lds)]

    def name(v: Value) -> str:
        if v.op is Ops.CONST:
            return f"{v.arg!r}:{v.dtype!r}"
        return f"%{v.id}"

    def emit(block, ind):
        for v in block:
            srcs = ", ".join(name(s) for s in v.src)
            if v.op is Ops.FOR:
                r = v.arg
                lines.append(f"{ind}for %{r.index.id} in range({srcs}) carried "
                             + ", ".join(name(c) for c in r.carried) + ":")
                emit(r.body, ind + "  ")
                lines.append(f"{ind}  yield " + ", ".join(name(y) for y in r.yields))
            elif v.op is Ops.IF:
                r = v.arg
                lines.append(f"{ind}if {srcs}:  # if{r.id}")
                emit(r.then, ind + "  ")
                lines.append(f"{ind}  yield " + ", ".join(name(y) for y in r.then_yields))
                lines.append(f"{ind}else:")
                emit(r.else_, ind + "  ")
                lines.append(f"{ind}  yield " + ", ".join(name(y) for y in r.else_yields))
            else:
                arg = "" if v.arg is None else f" [{v.arg!r}]"
                lines.append(f"{ind}%{v.id}: {v.dtype!r} = {v.op.name}({srcs}){arg}")

    emit(kd.body, "  ")
    return "\n".join(lines)
