"""The numpy SIMT emulator: every lane of a batch of workgroups at once (DESIGN §5).

This is how numerics are verified without a GPU, so it is also the living definition of
what each op means. Layout after tinygrad's ``ops_python`` (one handler table, an
exec-mask stack) with Triton's interpreter habit of commenting every choice that matches
LLVM rather than numpy (``srem`` is ``fmod``-like, ``sdiv`` truncates, ...).

Values are numpy arrays broadcastable to ``[workgroups, lanes]`` (scalars) or
``[workgroups, lanes, n]`` (vectors). Storage types: i1 bool, iN intN (signed storage;
unsigned ops reinterpret), f16 float16, f32 float32, **bf16 as uint16 bit patterns** (numpy
has no bf16). Pointers are ``(root, byte offsets)``: the root is the kernel argument or LDS
allocation the pointer came from, and is static, so every access is checked against the
bounds of exactly that buffer. **Global memory uses byte addressing**: a pointer argument
is bound to a C-contiguous numpy array of any dtype; loads/stores read and write its bytes
through a ``uint8`` view, so results land in the caller's array.

Checks (each raises ``EmulationError`` naming the op, the buffer, its size and the index):

* out-of-bounds or misaligned global/LDS access (a predicated-off access is no access); a
  bounded load (``_bounded_load``) reads zeros past its num_bytes, as a buffer load does,
  and is an error only when an access crosses it;
* a wave-uniform ``if`` whose predicate differs within a wave; a transposing LDS read
  (``_lds_load_tr``) with part of a wave active or a misaligned address;
* LDS races since the last barrier, in both directions: a read of a byte another lane of
  the workgroup wrote, a write to a byte another lane read or wrote;
* async copies (gfx1250's counted per wave, NVIDIA's zero-filling cp.async per lane, by
  copies or by committed groups): the data lands at the wait that retires it; any access
  to the destination bytes before then (by any lane, the issuing one included), a copy
  into bytes another lane read or wrote since the last barrier, and a kernel that ends
  with copies in flight are errors;
* barriers and MMAs under divergent control (a barrier needs all lanes of a workgroup, an
  MMA all lanes of a wave); division by zero, over-wide shifts, out-of-range float->int.

LDS starts filled with 0xFF bytes (NaN for every float type) so a read of never-written
LDS poisons the result instead of passing as zero.

Why one module: the handler table, the exec-mask stack and the memory model
(bounds, races, async copies in flight) share the state of one run; the table is the
definition of every op, and reads best in one place, as ``ops_python`` does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wgradcache.kernel import mma as _mma
from wgradcache.kernel.builder import _f32_to_bf16_bits
from wgradcache.kernel.ir import GLOBAL, DType, GroupOp, KernelDef, Ops, Value

__all__ = ["EmulationError", "EmulationCounts", "emulate", "f32_to_bf16", "bf16_to_f32"]


class EmulationError(RuntimeError):
    """A kernel did something the hardware would not tolerate (see module docstring)."""

    def __init__(self, msg: str, *, op: str = "", buffer: str = "", size: int = -1,
                 index: int = -1):
        super().__init__(msg)
        self.op, self.buffer, self.size, self.index = op, buffer, size, index


@dataclass(frozen=True)
class EmulationCounts:
    """What one launch did (counts are per op execution by at least one lane); the judged
    result of a run is ``numerics.run.EmulationReport``."""

    workgroups: int
    batches: int
    barriers: int
    mma_ops: int
    atomic_adds: int
    async_copies: int


_NP = {"i1": np.bool_, "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
       "f16": np.float16, "bf16": np.uint16, "f32": np.float32}
_UNSIGNED = {np.dtype(np.int8): np.uint8, np.dtype(np.int16): np.uint16,
             np.dtype(np.int32): np.uint32, np.dtype(np.int64): np.uint64}
_NONE, _MANY = -1, -2  # race-tracking states of a byte besides "this one lane"
_ASYNC_WAVE = 32  # gfx1250's async copies: wave32, one ASYNCcnt per wave


@dataclass(frozen=True, eq=False)
class _Lanes:
    """The active lanes of one op, in (workgroup, lane) order: the index arrays [A] that
    every memory helper takes together (``_Machine.lanes``)."""

    w: np.ndarray
    lane: np.ndarray

    def __len__(self) -> int:
        return len(self.w)

    def where(self, sel: np.ndarray) -> _Lanes:
        return _Lanes(self.w[sel], self.lane[sel])


def f32_to_bf16(x) -> np.ndarray:
    """float32 -> bf16 bits (uint16), round to nearest even."""
    return _f32_to_bf16_bits(np.asarray(x, np.float32))


def bf16_to_f32(bits) -> np.ndarray:
    """bf16 bits (uint16) -> float32 (exact)."""
    return (np.asarray(bits).astype(np.uint32) << np.uint32(16)).view(np.float32)


def _np(dt: DType):
    return _NP[dt.scalar]


def _to_f32(x: np.ndarray, dt: DType) -> np.ndarray:
    return bf16_to_f32(x) if dt.scalar == "bf16" else x.astype(np.float32)


def _from_f32(x: np.ndarray, dt: DType) -> np.ndarray:
    if dt.scalar == "bf16":
        return f32_to_bf16(x)
    return x.astype(_np(dt))


def _f64_to_f32_odd(x: np.ndarray) -> np.ndarray:
    """float64 -> float32 rounding to odd: a later round to <= 22 bits is then exact-once."""
    y = x.astype(np.float32)
    bits = y.view(np.uint32).copy()
    inexact = (y.astype(np.float64) != x) & np.isfinite(x)
    fix = inexact & ((bits & 1) == 0)
    toward_zero = np.abs(y.astype(np.float64)) > np.abs(x)
    bits = np.where(fix, np.where(toward_zero, bits - 1, bits + 1), bits).astype(np.uint32)
    return bits.view(np.float32)


def _from_f64(x: np.ndarray, dt: DType) -> np.ndarray:
    """float64 -> dt with one rounding to nearest even (numpy rounds f64->f16/f32 directly;
    bf16 goes through a round-to-odd f32, which keeps the final rounding correct)."""
    if dt.scalar == "bf16":
        return f32_to_bf16(_f64_to_f32_odd(x))
    return x.astype(_np(dt))


def _to_f64(x: np.ndarray, dt: DType) -> np.ndarray:
    return _to_f32(x, dt).astype(np.float64) if dt.scalar == "bf16" else x.astype(np.float64)


def _fma_f64_odd(a, b, c) -> np.ndarray:
    """a*b+c for f16/bf16/f32 inputs as float64 rounded to odd (the product is exact in
    float64; TwoSum recovers the rounding error of the sum and sets the sticky bit)."""
    p = a * b
    s = p + c
    bb = s - p
    err = (p - (s - bb)) + (c - bb)
    bits = s.view(np.uint64)
    fix = (err != 0) & ((bits & np.uint64(1)) == 0) & np.isfinite(s)
    return np.where(fix, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)


def _uview(x: np.ndarray) -> np.ndarray:
    return x if x.dtype == np.bool_ else x.astype(_UNSIGNED[x.dtype])


class _Ptr:
    """A per-lane pointer: static root (kind, name) and byte offsets from the root's base."""

    __slots__ = ("kind", "name", "off")

    def __init__(self, kind: str, name: str, off: np.ndarray):
        self.kind, self.name, self.off = kind, name, off


def _where(mask: np.ndarray, a, b):
    """Per-lane merge of two values (arrays or pointers of one root)."""
    if isinstance(a, _Ptr):
        if not isinstance(b, _Ptr) or (a.kind, a.name) != (b.kind, b.name):
            raise EmulationError(f"a pointer merges two buffers ({a.name} and "
                                 f"{getattr(b, 'name', '?')}); the emulator needs one root")
        return _Ptr(a.kind, a.name, np.where(mask, a.off, b.off))
    if a.ndim == 3:
        mask = mask[..., None]
    return np.where(mask, a, b)


@dataclass
class _AsyncRecord:
    """One async copy op execution: per copying lane, its LDS bytes and data."""

    op: str
    # lanes that share one completion counter: a wave (gfx1250's ASYNCcnt) or one lane
    # (NVIDIA's cp.async groups are the executing thread's)
    scope: int
    issued: np.ndarray  # [G, L / scope] bool: counters that count it
    wg: np.ndarray  # [A] workgroup of each copying lane
    lane: np.ndarray  # [A]
    lds_idx: np.ndarray  # [A, nbytes] index into the flattened [G, bytes] LDS
    data: np.ndarray  # [A, nbytes] uint8
    # [A] the copying lane's cp.async group (its commits before the issue; ASYNC_COMMIT):
    # what ASYNC_WAIT_GROUP counts (per lane, scope 1)
    group: np.ndarray

    def rest(self, landed: np.ndarray, issued: np.ndarray) -> _AsyncRecord:
        """This record less its ``landed`` lanes [A], counted by ``issued`` now."""
        keep = ~landed
        return _AsyncRecord(self.op, self.scope, issued, self.wg[keep], self.lane[keep],
                            self.lds_idx[keep], self.data[keep], self.group[keep])


class _Machine:
    """Runs a kernel over one batch of workgroups at a time."""

    def __init__(self, kd: KernelDef, grid, args: dict, check_races: bool):
        self.kd = kd
        self.grid = tuple(grid)
        self.L = kd.block_size
        self.check_races = check_races
        self.globals: dict[str, np.ndarray] = {}
        self.scalars: dict[str, np.ndarray] = {}
        for a in kd.args:
            if a.name not in args:
                raise EmulationError(f"{kd.name}: argument {a.name!r} not given")
            x = args[a.name]
            if a.dtype.is_ptr:
                if not isinstance(x, np.ndarray) or not x.flags.c_contiguous:
                    raise EmulationError(f"argument {a.name!r} must be a C-contiguous array")
                if not x.flags.writeable:
                    raise EmulationError(f"argument {a.name!r} is read-only")
                self.globals[a.name] = x.reshape(-1).view(np.uint8)
            else:
                if isinstance(x, np.ndarray | list | tuple):
                    raise EmulationError(f"argument {a.name!r} must be a scalar")
                if a.dtype.is_int:
                    bits = a.dtype.bits
                    v = int(x) & ((1 << bits) - 1)
                    v = v - (1 << bits) if v >> (bits - 1) else v
                    arr = np.array(v, _np(a.dtype))
                else:
                    arr = _from_f64(np.array(float(x)), a.dtype)
                self.scalars[a.name] = arr.reshape(1, 1)
        self.lds_base: dict[str, int] = {}
        total = 0
        for alloc in kd.lds:
            total = -(-total // alloc.align) * alloc.align
            self.lds_base[alloc.name] = total
            total += alloc.nbytes
        self.lds_total = total
        self.counts = dict(barriers=0, mma_ops=0, atomic_adds=0, async_copies=0)

    # -- batch state ---------------------------------------------------------------------------
    def run_batch(self, lin: np.ndarray):
        gx, gy, _ = self.grid
        G = len(lin)
        self.G = G
        self.lin = lin
        self.wg_xyz = (lin % gx, (lin // gx) % gy, lin // (gx * gy))
        self.env: dict[int, object] = {}
        self.lds = np.full((G, max(self.lds_total, 1)), 0xFF, np.uint8)
        n = self.lds.shape[1]
        # per LDS byte since the last barrier: which lane read / wrote it (_NONE, a lane id,
        # or _MANY for several lanes)
        self.readers = np.full((G, n), _NONE, np.int32)
        self.writers = np.full((G, n), _NONE, np.int32)
        self.pend = np.full((G, n), -1, np.int32)
        self.records: list[_AsyncRecord] = []
        self.commits = np.zeros((G, self.L), np.int32)  # cp.async groups each lane closed
        self.all_lanes = _Lanes(np.repeat(np.arange(G), self.L), np.tile(np.arange(self.L), G))
        mask = np.ones((G, self.L), bool)
        self.block(self.kd.body, mask)
        if self.records:
            r = self.records[0]
            raise EmulationError(
                f"{self.kd.name}: {r.op} (async copy) still in flight at the end of the "
                f"kernel (workgroup {self.wg_name(int(r.wg[0]))}, lane {int(r.lane[0])}): "
                "missing async_wait", op=r.op, buffer="LDS")

    def wg_name(self, g: int) -> str:
        return "(" + ",".join(str(int(c[g])) for c in self.wg_xyz) + ")"

    # -- values --------------------------------------------------------------------------------
    def val(self, v: Value):
        got = self.env.get(v.id)
        if got is not None:
            return got
        if v.op in GroupOp.GlobalDefs:
            out = self.global_def(v)
            self.env[v.id] = out
            return out
        # a value of a region no lane entered: its lanes are never used
        return self.zeros(v.dtype)

    def zeros(self, dt: DType):
        shape = (1, 1, dt.count) if dt.is_vector else (1, 1)
        return np.zeros(shape, _np(dt))

    def global_def(self, v: Value):
        op = v.op
        if op is Ops.ARG:
            a = self.kd.args[v.arg]
            if a.dtype.is_ptr:
                return _Ptr("global", a.name, np.zeros((1, 1), np.int64))
            return self.scalars[a.name]
        if op is Ops.LDS_ALLOC:
            return _Ptr("lds", v.arg, np.zeros((1, 1), np.int64))
        if op is Ops.CONST:
            arr = np.array(v.arg)
            if v.dtype.scalar == "bf16":
                arr = f32_to_bf16(arr)
            arr = arr.astype(_np(v.dtype))
            return arr.reshape((1, 1, v.dtype.count) if v.dtype.is_vector else (1, 1))
        if op is Ops.THREAD_ID:
            return np.arange(self.L, dtype=np.int32)[None, :]
        if op is Ops.WORKGROUP_ID:
            return self.wg_xyz[v.arg].astype(np.int32)[:, None]
        raise AssertionError(op)

    def block(self, stmts, mask: np.ndarray):
        for v in stmts:
            _HANDLERS[v.op](self, v, mask)

    def fail(self, v: Value, msg: str, **kw):
        raise EmulationError(f"{self.kd.name}: {v.op.name} %{v.id}: {msg}", op=v.op.name, **kw)

    def active_check(self, v: Value, mask, bad, what: str):
        bad = np.broadcast_to(bad, mask.shape) & mask
        if bad.any():
            g, lane = (int(x[0]) for x in np.nonzero(bad))
            self.fail(v, f"{what} in workgroup {self.wg_name(g)}, lane {lane}")

    # -- memory helpers ------------------------------------------------------------------------
    def lanes(self, mask: np.ndarray, pred: np.ndarray | None) -> _Lanes:
        """The active lanes (``mask``, and ``pred`` where given)."""
        m = mask if pred is None else mask & np.broadcast_to(pred, mask.shape)
        if m.all():
            return self.all_lanes
        return _Lanes(*np.nonzero(m))

    def addresses(self, v: Value, p: _Ptr, at: _Lanes, nbytes: int, align: int):
        """Byte offsets of the active lanes (checked against the root's bounds) -> [A]."""
        w, lane = at.w, at.lane
        off = np.broadcast_to(p.off, (self.G, self.L))[w, lane]
        where, size = self.root(p)
        bad = (off < 0) | (off + nbytes > size)
        if bad.any():
            j = int(np.argmax(bad))
            self.fail(v, f"out of bounds: {nbytes} bytes at byte {int(off[j])} of {where} "
                         f"{p.name!r} ({size} bytes), workgroup {self.wg_name(int(w[j]))}, "
                         f"lane {int(lane[j])}", buffer=p.name, size=size, index=int(off[j]))
        self.check_aligned(v, p, lane, off, align)
        return off

    def root(self, p: _Ptr) -> tuple[str, int]:
        """What a pointer's root is, in words, and its size in bytes."""
        if p.kind == "global":
            return "buffer", self.globals[p.name].size
        return "LDS allocation", self.kd.lds_alloc(p.name).nbytes

    def check_aligned(self, v: Value, p: _Ptr, lane, off: np.ndarray, align: int) -> None:
        """Every lane's byte offset ``off`` [A] a multiple of ``align``."""
        mis = off % align != 0
        if mis.any():
            j = int(np.argmax(mis))
            where, size = self.root(p)
            self.fail(v, f"byte {int(off[j])} of {where} {p.name!r} is not {align}-byte aligned "
                         f"(lane {int(lane[j])})", buffer=p.name, size=size, index=int(off[j]))

    def lds_flat(self, p: _Ptr, w, off: np.ndarray, nbytes: int) -> np.ndarray:
        """Indices into the flattened [G, lds bytes] LDS of the accessed bytes: [A, nbytes]."""
        return (w * self.lds.shape[1] + self.lds_base[p.name] + off)[:, None] + np.arange(nbytes)

    def race_check(self, v: Value, at: _Lanes, idx, write: bool, name: str):
        """LDS race tracking for one access of the active lanes (idx: lds_flat [A, nbytes])."""
        w, lane = at.w, at.lane
        nb = self.lds.shape[1]
        flat = idx.ravel()
        pend = self.pend.reshape(-1)[flat]
        if (pend >= 0).any():
            k = int(np.argmax(pend >= 0))
            byte = int(flat[k]) % nb - self.lds_base[name]
            j = k // idx.shape[1]
            self.fail(v, f"{'writes' if write else 'reads'} byte {byte} of LDS {name!r} while "
                         f"an async copy of lane {int(pend[k])} into it is in flight (no "
                         f"async_wait), workgroup {self.wg_name(int(w[j]))}, lane {int(lane[j])}",
                      buffer=name, index=byte)
        if not self.check_races:
            return
        lanes = np.repeat(lane, idx.shape[1])
        wr = self.writers.reshape(-1)[flat]
        other_w = (wr != _NONE) & (wr != lanes)
        bad = other_w
        if write:
            rd = self.readers.reshape(-1)[flat]
            bad = bad | ((rd != _NONE) & (rd != lanes))
        if bad.any():
            k = int(np.argmax(bad))
            j = k // idx.shape[1]
            other = int(wr[k]) if other_w[k] else int(rd[k])
            who = f"lane {other}" if other >= 0 else "several lanes"
            byte = int(flat[k]) % self.lds.shape[1] - self.lds_base[name]
            self.fail(v, f"LDS race: lane {int(lane[j])} of workgroup {self.wg_name(int(w[j]))} "
                         f"{'writes' if write else 'reads'} byte {byte} of {name!r}, "
                         f"{'written' if other_w[k] else 'read'} by {who} since the last "
                         "barrier", buffer=name, index=byte)
        state = (self.writers if write else self.readers).reshape(-1)
        prior = wr if write else state[flat]
        want = np.where((prior == _NONE) | (prior == lanes), lanes, _MANY).astype(np.int32)
        state[flat] = want
        # several lanes of this op on one byte: whichever won the assignment, another differs
        clash = state[flat] != want
        if clash.any():
            if write:
                k = int(np.argmax(clash))
                byte = int(flat[k]) % self.lds.shape[1] - self.lds_base[name]
                self.fail(v, f"LDS race: lanes {int(lanes[k])} and {int(state[flat[k]])} of "
                             f"workgroup {self.wg_name(int(w[k // idx.shape[1]]))} write byte "
                             f"{byte} of {name!r} in one op", buffer=name, index=byte)
            state[flat[clash]] = _MANY


# ---- handlers: one per op (group) --------------------------------------------------------------

def _int_binary(m: _Machine, v: Value, mask):
    a, b = (m.val(s) for s in v.src)
    op = v.op
    if v.dtype.scalar == "i1":
        # LLVM i1 arithmetic is modulo 2: add/sub = xor, mul = and
        fn = {Ops.ADD: np.logical_xor, Ops.SUB: np.logical_xor, Ops.MUL: np.logical_and,
              Ops.AND: np.logical_and, Ops.OR: np.logical_or, Ops.XOR: np.logical_xor}.get(op)
        if fn is None:
            m.fail(v, "not defined on i1 in the emulator")
        m.env[v.id] = fn(a, b)
        return
    if op in _WRAPPING:
        m.env[v.id] = _WRAPPING[op](a, b).astype(a.dtype)
    elif op in (Ops.UDIV, Ops.UREM, Ops.SDIV, Ops.SREM):
        m.active_check(v, mask, _lane_any(b == 0), "division by zero (LLVM: undefined)")
        m.env[v.id] = _divide(m, v, mask, a, np.where(b == 0, 1, b).astype(b.dtype))
    elif op in (Ops.SHL, Ops.LSHR, Ops.ASHR):
        bits = v.dtype.bits
        m.active_check(v, mask, _lane_any(_uview(b) >= bits),
                       f"shift by >= {bits} (LLVM: poison)")
        sh = (_uview(b) % bits).astype(_uview(a).dtype)
        if op is Ops.SHL:
            out = _uview(a) << sh
        elif op is Ops.LSHR:
            out = _uview(a) >> sh  # logical: on the unsigned view
        else:
            out = a >> sh.astype(a.dtype)  # arithmetic: numpy >> on signed storage
        m.env[v.id] = out.astype(a.dtype)
    else:  # UMIN / UMAX compare as unsigned
        fn = np.minimum if op is Ops.UMIN else np.maximum
        m.env[v.id] = fn(_uview(a), _uview(b)).astype(a.dtype)


_WRAPPING = {Ops.ADD: np.add, Ops.SUB: np.subtract, Ops.MUL: np.multiply,
             Ops.AND: np.bitwise_and, Ops.OR: np.bitwise_or, Ops.XOR: np.bitwise_xor,
             Ops.SMIN: np.minimum, Ops.SMAX: np.maximum}


def _lane_any(bad: np.ndarray) -> np.ndarray:
    return bad.any(axis=-1) if bad.ndim == 3 else bad


def _divide(m: _Machine, v: Value, mask, a, b):
    op = v.op
    if op is Ops.UDIV:
        return (_uview(a) // _uview(b)).astype(a.dtype)
    if op is Ops.UREM:
        return (_uview(a) % _uview(b)).astype(a.dtype)
    if op is Ops.SREM:
        # LLVM srem (create_srem): the remainder takes the dividend's sign, like C's % and
        # np.fmod; numpy's % would take the divisor's sign.
        return np.fmod(a, b).astype(a.dtype)
    # LLVM sdiv truncates toward zero; numpy // floors, so step back by one when the signs
    # differ and the division is inexact. INT_MIN / -1 overflows: LLVM undefined behaviour.
    imin = np.iinfo(a.dtype).min
    m.active_check(v, mask, _lane_any((a == imin) & (b == -1)), "sdiv overflow (INT_MIN / -1)")
    q = a // b
    fix = (np.fmod(a, b) != 0) & ((a < 0) != (b < 0))
    return (q + fix.astype(a.dtype)).astype(a.dtype)


def _float_binary(m: _Machine, v: Value, mask):
    a, b = (m.val(s) for s in v.src)
    fn = _FLOAT_FN[v.op]
    if v.dtype.scalar == "bf16":
        # bf16 has no numpy type: compute in f32 (exact inputs) and round once to bf16; f32's
        # 24 bits >= 2*8+2 make this double rounding innocuous for + - * /
        m.env[v.id] = _from_f32(fn(_to_f32(a, v.dtype), _to_f32(b, v.dtype)), v.dtype)
    else:
        # numpy f16 ops compute in f32 and round to f16: correct by the same argument
        m.env[v.id] = fn(a, b).astype(a.dtype)


# FMIN/FMAX are llvm.minnum/maxnum: a NaN operand yields the other one, as np.fmin/fmax
_FLOAT_FN = {Ops.FADD: np.add, Ops.FSUB: np.subtract, Ops.FMUL: np.multiply,
             Ops.FDIV: np.divide, Ops.FMIN: np.fmin, Ops.FMAX: np.fmax}


def _unary(m: _Machine, v: Value, mask):
    a = m.val(v.src[0])
    if v.op is Ops.NOT:
        m.env[v.id] = ~a
    elif v.dtype.scalar == "bf16":
        m.env[v.id] = a ^ np.uint16(0x8000)  # fneg flips the sign bit only
    else:
        m.env[v.id] = -a


_ICMP = {"eq": np.equal, "ne": np.not_equal, "slt": np.less, "sle": np.less_equal,
         "sgt": np.greater, "sge": np.greater_equal, "ult": np.less, "ule": np.less_equal,
         "ugt": np.greater, "uge": np.greater_equal}
_FCMP = {"oeq": np.equal, "olt": np.less, "ole": np.less_equal, "ogt": np.greater,
         "oge": np.greater_equal}


def _compare(m: _Machine, v: Value, mask):
    a, b = (m.val(s) for s in v.src)
    pred = v.arg
    if v.op is Ops.ICMP:
        if pred[0] == "u":  # unsigned predicates: reinterpret, so 0x80000000 > 0x7fffffff
            a, b = _uview(a), _uview(b)
        m.env[v.id] = _ICMP[pred](a, b)
        return
    dt = v.src[0].dtype
    a, b = _to_f32(a, dt), _to_f32(b, dt)
    if pred in _FCMP:  # ordered: numpy comparisons are already false on NaN
        out = _FCMP[pred](a, b)
    elif pred == "one":
        out = (a != b) & ~np.isnan(a) & ~np.isnan(b)
    elif pred == "une":
        out = a != b  # unordered-or-not-equal: true on NaN, as numpy's !=
    elif pred == "ord":
        out = ~np.isnan(a) & ~np.isnan(b)
    else:
        out = np.isnan(a) | np.isnan(b)
    m.env[v.id] = out


def _select(m: _Machine, v: Value, mask):
    c, a, b = (m.val(s) for s in v.src)
    if v.dtype.is_vector and c.ndim == 2:
        c = c[..., None]
    m.env[v.id] = np.where(c, a, b)


def _fma(m: _Machine, v: Value, mask):
    a, b, c = (_to_f64(m.val(s), v.dtype) for s in v.src)
    m.env[v.id] = _from_f64(_fma_f64_odd(a, b, c), v.dtype)


def _cast(m: _Machine, v: Value, mask):
    s = v.src[0]
    x = m.val(s)
    sd, dd = s.dtype, v.dtype
    op = v.op
    if op is Ops.FPCAST:
        # f16 and bf16 are exact in f32; one rounding (nearest even) to the target
        out = _from_f32(_to_f32(x, sd), dd)
    elif op in (Ops.SITOFP, Ops.UITOFP):
        src = _uview(x) if op is Ops.UITOFP else x
        out = _from_f64(src.astype(np.float64), dd)  # exact for <= 53-bit integers
    elif op in (Ops.FPTOSI, Ops.FPTOUI):
        f = np.trunc(_to_f64(x, sd))
        info = np.iinfo(_np(dd)) if op is Ops.FPTOSI else np.iinfo(_UNSIGNED[np.dtype(_np(dd))])
        bad = np.isnan(f) | (f < info.min) | (f > info.max)
        m.active_check(v, mask, _lane_any(bad), f"{op.name} out of range (LLVM: poison)")
        tgt = _np(dd) if op is Ops.FPTOSI else _UNSIGNED[np.dtype(_np(dd))]
        out = np.where(bad, 0, f).astype(tgt).astype(_np(dd))
    elif op is Ops.TRUNC:
        out = (x & 1).astype(bool) if dd.scalar == "i1" else x.astype(_np(dd))
    elif op is Ops.ZEXT:
        out = _uview(x).astype(_UNSIGNED[np.dtype(_np(dd))]).astype(_np(dd))
    elif op is Ops.SEXT:
        out = -(x.astype(_np(dd))) if sd.scalar == "i1" else x.astype(_np(dd))
    elif op is Ops.BITCAST:
        out = _bitcast(x, sd, dd)
    else:  # PTR_CAST: same address, new element type
        out = x
    m.env[v.id] = out


def _bitcast(x: np.ndarray, sd: DType, dd: DType) -> np.ndarray:
    arr = np.ascontiguousarray(x if sd.is_vector else x[..., None])
    out = arr.view(np.uint8).view(_np(dd))
    return out if dd.is_vector else out[..., 0]


def _vbuild(m: _Machine, v: Value, mask):
    parts = np.broadcast_arrays(*(m.val(s) for s in v.src))
    m.env[v.id] = np.stack(parts, axis=-1)


def _vextract(m: _Machine, v: Value, mask):
    m.env[v.id] = m.val(v.src[0])[..., v.arg]


def _vinsert(m: _Machine, v: Value, mask):
    vec, x = m.val(v.src[0]), m.val(v.src[1])
    shape = np.broadcast_shapes(vec.shape[:2], x.shape) + vec.shape[2:]
    out = np.array(np.broadcast_to(vec, shape))
    out[..., v.arg] = x
    m.env[v.id] = out


def _vshuffle(m: _Machine, v: Value, mask):
    a, b = np.broadcast_arrays(m.val(v.src[0]), m.val(v.src[1]))
    if a.ndim == 2:
        a, b = a[..., None], b[..., None]
    m.env[v.id] = np.concatenate([a, b], axis=-1)[..., list(v.arg)]


def _gep(m: _Machine, v: Value, mask):
    p, idx = m.val(v.src[0]), m.val(v.src[1])
    step = v.dtype.elem.itemsize
    m.env[v.id] = _Ptr(p.kind, p.name, p.off + idx.astype(np.int64) * step)


def _pred_of(m: _Machine, v: Value, n_fixed: int):
    return m.val(v.src[n_fixed]) if len(v.src) > n_fixed else None


def _load(m: _Machine, v: Value, mask):
    p = m.val(v.src[0])
    dt = v.dtype
    at = m.lanes(mask, _pred_of(m, v, 1))
    if len(at) == m.G * m.L:
        out = _gather(m, v, p, at).reshape(m.G, m.L, dt.count)
    else:
        out = np.zeros((m.G, m.L, dt.count), _np(dt))  # predicated-off lanes read 0
        if len(at):
            out[at.w, at.lane] = _gather(m, v, p, at)
    m.env[v.id] = out if dt.is_vector else out[..., 0]


def _gather(m: _Machine, v: Value, p: _Ptr, at: _Lanes) -> np.ndarray:
    """The loaded values (``v.dtype``) of the active lanes: [A, count]."""
    dt = v.dtype
    off = m.addresses(v, p, at, dt.nbytes, v.arg)
    if p.kind == "global":
        raw = m.globals[p.name][off[:, None] + np.arange(dt.nbytes)]
    else:
        idx = m.lds_flat(p, at.w, off, dt.nbytes)
        m.race_check(v, at, idx, False, p.name)
        raw = m.lds.reshape(-1)[idx]
    return raw.view(_np(dt))


def _bounded_load(m: _Machine, v: Value, mask):
    """A load whose range check is the access's own, as a raw buffer load (stride 0) does it.

    Per active lane, with the byte offset and num_bytes read as unsigned 32-bit integers and
    compared in exact (unwrapped) arithmetic:

    * ``off + size <= num_bytes``: the bytes are read (bounds and alignment checked against
      the real buffer, so a num_bytes larger than the buffer is caught);
    * ``off >= num_bytes``: zeros, nothing is accessed, the offset need not be aligned;
    * in between (the access crosses num_bytes): an error; what the hardware returns then
      differs between chips and is not a rule a kernel may rely on.

    Sources for the rule: the Triton Gluon docs of ``amd.rdna4.buffer.make_buffer_descriptor``
    and ``amd.cdna5...`` ("an access is in bounds only if soffset + offset + size <=
    num_records"; accesses crossing it are checked in 4-byte pieces, chip-dependent);
    the MLIR AMDGPU dialect's ``amdgpu.raw_buffer_load`` ("When a load is out of bounds, the
    instruction returns zero. Partially-out of bounds have chipset-dependent behavior");
    LLVM IntrinsicsAMDGPU.td, ``raw.ptr.buffer.load``: the voffset is "included in bounds
    checking", the soffset (0 here) excluded. The generator plants 0x80000000 for an
    invalid element (Triton's ``fillCommonArgs`` and CK's offset trick do the same): past
    every buffer ``serves`` admits (< 2^31 bytes), whatever the access size.

    With a fourth operand the record starts that many bytes (unsigned) into ``p``: the
    resource's base address moves, the offset and num_bytes count from there. The start
    and num_bytes must be one value over each workgroup (they are scalar registers);
    the real buffer's bounds are still checked on every access read.
    """
    p, off, num = (m.val(s) for s in v.src[:3])
    start = m.val(v.src[3]) if len(v.src) == 4 else None
    dt = v.dtype
    size = dt.nbytes
    at = m.lanes(mask, None)
    w, lane = at.w, at.lane
    out = np.zeros((m.G, m.L, dt.count), _np(dt))
    for name, x in (("num_bytes", num), ("the record's start", start)):
        if x is not None:  # one buffer resource (SGPRs) per workgroup: the same value
            _workgroup_uniform(m, v, mask, x, name)
    if start is not None:
        first = np.broadcast_to(start, (m.G, m.L)).astype(np.int64) & 0xFFFFFFFF
        p = _Ptr(p.kind, p.name, np.broadcast_to(p.off, (m.G, m.L)) + first)
    if len(w):
        offs = np.broadcast_to(off, (m.G, m.L))[w, lane].astype(np.int64) & 0xFFFFFFFF
        n = np.broadcast_to(num, (m.G, m.L))[w, lane].astype(np.int64) & 0xFFFFFFFF
        inside = offs + size <= n
        cross = ~inside & (offs < n)
        if cross.any():
            j = int(np.argmax(cross))
            m.fail(v, f"a {size}-byte access at byte offset {int(offs[j]):#x} crosses "
                      f"num_bytes {int(n[j])} (partly out of range: chip-dependent), "
                      f"workgroup {m.wg_name(int(w[j]))}, lane {int(lane[j])}",
                   buffer=p.name, index=int(offs[j]))
        if inside.any():
            sub = at.where(inside)
            full = np.zeros((m.G, m.L), np.int64)
            full[sub.w, sub.lane] = offs[inside]
            q = _Ptr(p.kind, p.name, np.broadcast_to(p.off, (m.G, m.L)) + full)
            out[sub.w, sub.lane] = _gather(m, v, q, sub)
    m.env[v.id] = out if dt.is_vector else out[..., 0]


def _workgroup_uniform(m: _Machine, v: Value, mask, x, name: str) -> None:
    """Fail unless ``x`` is one value over the active lanes of each workgroup."""
    full = np.broadcast_to(x, (m.G, m.L))
    first = full[np.arange(m.G), np.argmax(mask, axis=1)][:, None]
    bad = mask & (full != first)
    if bad.any():
        g, lane = (int(i[0]) for i in np.nonzero(bad))
        m.fail(v, f"{name} differs within workgroup {m.wg_name(g)} (lane {lane}): a buffer "
                  "resource is one value in scalar registers")


def _lds_load_tr(m: _Machine, v: Value, mask):
    """A transposing LDS read, by its lane map (``mma.TRANSPOSED_READS[v.arg]``, which cites
    the sources per read): each lane addresses a 16-byte row of 8 16-bit elements; lane
    ``l`` receives in slot ``s`` the 2 bytes of element ``read.elem(l)`` of the row lane
    ``read.src(l, s)`` addressed. gfx1250's ds_load_tr16_b128: 8-lane groups, lane 8G+c
    gets element c of row 8G+s; NVIDIA's ldmatrix .x4 .trans: lane 4g+t gets element g of
    rows 8(s//2) + 2t + s%2 (the four 8x8 matrices, each read column-major).

    Rejected as the hardware does not do them as documented: a wave with only part of its
    lanes active (ds_load_tr is convergent, IntrinsicsAMDGPU.td: assume EXEC all ones;
    ldmatrix is ``.sync.aligned``: every thread of the warp executes the same one) and an
    address that is not 16-byte aligned (PTX ISA: ldmatrix's row addresses must be; one
    source says ds_load_tr silently degrades to a plain b128 load). LDS races are tracked
    per byte for the lane that receives it.
    """
    (src,) = v.src
    read = _mma.transposed_read(v.arg)
    p = m.val(src)
    W = _ASYNC_WAVE  # wave32 on both targets that have one
    waves = mask.reshape(m.G, -1, W)
    active = waves.any(axis=-1)
    partial = active & ~waves.all(axis=-1)
    if partial.any():
        g, wv = (int(x[0]) for x in np.nonzero(partial))
        m.fail(v, f"wave {wv} of workgroup {m.wg_name(g)} runs {read.name} with part of "
                  "its lanes (every lane must take part)")
    out = np.zeros((m.G, m.L, 8), _np(v.dtype))
    at = _Lanes(*np.nonzero(mask))
    w, lane = at.w, at.lane
    if len(w):
        off = m.addresses(v, p, at, 16, 16)  # [A], in (workgroup, lane) order
        # whole waves are active, contiguous in this order: off[wave_start + src(l, s)]
        ln = np.arange(W)
        src_lane = read.src(ln[:, None], np.arange(8)[None, :])  # [W, 8]
        rows = off.reshape(-1, W)[:, src_lane]  # [A/W, W, 8]
        byte = rows[..., None] + 2 * read.elem(ln)[None, :, None, None] + np.arange(2)
        byte = byte.reshape(-1, 16)  # per receiving lane: 8 slots x 2 bytes
        idx = (w * m.lds.shape[1] + m.lds_base[p.name])[:, None] + byte
        m.race_check(v, at, idx, False, p.name)
        out[w, lane] = m.lds.reshape(-1)[idx].reshape(-1, 16).view(_np(v.dtype))
    m.env[v.id] = out


def _store(m: _Machine, v: Value, mask):
    p, x = m.val(v.src[0]), m.val(v.src[1])
    dt = v.src[1].dtype
    at = m.lanes(mask, _pred_of(m, v, 2))
    w, lane = at.w, at.lane
    if not len(w):
        return
    off = m.addresses(v, p, at, dt.nbytes, v.arg)
    full = np.broadcast_to(x if dt.is_vector else x[..., None], (m.G, m.L, dt.count))
    if len(w) == m.G * m.L:
        vals = np.ascontiguousarray(full).reshape(-1, dt.count)
    else:
        vals = np.ascontiguousarray(full[w, lane])
    raw = vals.view(np.uint8)
    if p.kind == "global":
        m.globals[p.name][off[:, None] + np.arange(dt.nbytes)] = raw
    else:
        idx = m.lds_flat(p, w, off, dt.nbytes)
        m.race_check(v, at, idx, True, p.name)
        m.lds.reshape(-1)[idx] = raw


def _atomic_add(m: _Machine, v: Value, mask):
    """Adds applied one at a time in lane order (workgroup, then lane, then element), each
    rounded to the storage type: a packed f16 add rounds to f16 after every add. Adds to
    distinct addresses are independent, so they run in rounds: round r applies the r-th
    pending add of every address at once."""
    p, x = m.val(v.src[0]), m.val(v.src[1])
    dt = v.src[1].dtype
    at = m.lanes(mask, _pred_of(m, v, 2))
    w, lane = at.w, at.lane
    if not len(w):
        return
    m.counts["atomic_adds"] += 1
    off = m.addresses(v, p, at, dt.nbytes, dt.nbytes)
    vals = np.broadcast_to(x if dt.is_vector else x[..., None], (m.G, m.L, dt.count))[w, lane]
    esz = dt.itemsize
    addr = (off[:, None] + esz * np.arange(dt.count)).ravel()
    vals = _to_f32(vals.ravel(), dt.base)
    order = np.argsort(addr, kind="stable")
    addr, vals = addr[order], vals[order]
    first = np.r_[True, addr[1:] != addr[:-1]]
    start = np.maximum.accumulate(np.where(first, np.arange(len(addr)), 0))
    rank = np.arange(len(addr)) - start
    buf = m.globals[p.name]
    store_t = _np(dt.base)
    for r in range(int(rank.max()) + 1):
        sel = rank == r
        a = addr[sel][:, None] + np.arange(esz)
        cur = _to_f32(np.ascontiguousarray(buf[a]).view(store_t)[:, 0], dt.base)
        new = _from_f32((cur + vals[sel]).astype(np.float32), dt.base)  # f32 add, then round
        buf[a] = np.ascontiguousarray(new.astype(store_t)[:, None]).view(np.uint8)


def _async_copy(m: _Machine, v: Value, mask):
    """gfx1250 global_load_async_to_lds: the active lanes' copies, counted per wave."""
    src, dst = m.val(v.src[0]), m.val(v.src[1])
    nbytes = v.arg
    at = m.lanes(mask, _pred_of(m, v, 2))
    if not len(at):
        return
    _, align = _async_rule(v)
    goff = m.addresses(v, src, at, nbytes, align)
    data = m.globals[src.name][goff[:, None] + np.arange(nbytes)]
    _async_issue(m, v, dst, at, data)


def _async_copy_zfill(m: _Machine, v: Value, mask):
    """NVIDIA cp.async with src-size: every active lane's copy lands ``nbytes``; where
    ``keep`` is false they are zeros and the source is not read (src-size 0; PTX ISA
    §9.7.9.25 "cp.async": the bytes of cp-size past src-size are filled with zeros;
    CUTLASS cute/arch/copy_sm80.hpp ``SM80_CP_ASYNC_CACHEGLOBAL_ZFILL`` passes src-size 0
    for a false predicate, and never an out-of-range read). Both addresses aligned to the
    copy size (PTX ISA "Addresses as Operands": naturally aligned). Counted per lane:
    "cp.async.wait_group / cp.async.wait_all" make the executing thread wait for its own
    cp.async-groups, so another lane's wait, even in the same warp, retires nothing of
    this lane's."""
    src, dst, keep = (m.val(s) for s in v.src)
    nbytes = v.arg
    at = m.lanes(mask, None)
    w, lane = at.w, at.lane
    if not len(w):
        return
    kept = np.broadcast_to(keep, (m.G, m.L))[w, lane]
    data = np.zeros((len(w), nbytes), np.uint8)
    # the address operand is aligned even where nothing is read
    m.check_aligned(v, src, lane, np.broadcast_to(src.off, (m.G, m.L))[w, lane], nbytes)
    if kept.any():
        goff = m.addresses(v, src, at.where(kept), nbytes, nbytes)
        data[kept] = m.globals[src.name][goff[:, None] + np.arange(nbytes)]
    _async_issue(m, v, dst, at, data)


def _async_rule(v: Value) -> tuple[int, int]:
    """(scope, alignment) of an async copy op: which lanes share a counter (a wave, or each
    lane: ``_AsyncRecord.scope``) and the byte alignment of both its addresses."""
    if v.op is Ops.ASYNC_COPY_ZFILL:
        return 1, v.arg  # cp.async: per thread, naturally aligned
    # the copy's alignment rules are not in our sources: we require dword alignment
    return _ASYNC_WAVE, 4


def _async_issue(m: _Machine, v: Value, dst, at: _Lanes, data: np.ndarray) -> None:
    """Put one copy op's bytes in flight: they land at the wait that retires them."""
    m.counts["async_copies"] += 1
    scope, align = _async_rule(v)
    w, lane = at.w, at.lane
    nbytes = data.shape[1]
    loff = m.addresses(v, dst, at, nbytes, align)
    idx = m.lds_flat(dst, w, loff, nbytes)
    # into bytes another lane read or wrote since the last barrier, or still in flight: a race;
    # the bytes count as written by the issuing lane (they are its own once they land)
    m.race_check(v, at, idx, True, dst.name)
    m.pend.reshape(-1)[idx.ravel()] = np.repeat(lane, nbytes)
    issued = np.zeros((m.G, -(-m.L // scope)), bool)
    issued[w, lane // scope] = True
    m.records.append(_AsyncRecord(f"{v.op.name} %{v.id}", scope, issued, w, lane, idx, data,
                                  m.commits[w, lane]))


def _land(m: _Machine, rec: _AsyncRecord, land_lane: np.ndarray) -> None:
    """The bytes of ``rec``'s lanes ``land_lane`` [A] land in LDS."""
    il = rec.lds_idx[land_lane]
    m.lds.reshape(-1)[il] = rec.data[land_lane]
    m.pend.reshape(-1)[il] = -1
    if m.check_races:
        # landed bytes are the issuing lane's writes, even when a barrier came between
        # the issue and the wait: other lanes need a barrier after the wait to read them
        st = m.writers.reshape(-1)
        lanes = np.broadcast_to(rec.lane[land_lane][:, None], il.shape)
        prior = st[il]
        st[il] = np.where((prior == _NONE) | (prior == lanes), lanes, _MANY)


def _async_wait(m: _Machine, v: Value, mask):
    """Each counter (a wave, or a lane: ``_AsyncRecord.scope``) with an active lane retires
    its copies until <= n are in flight; counters count only copies they issued with at
    least one active lane (never over-count)."""
    n = v.arg
    w, lane = np.nonzero(mask)
    waiting: dict[int, np.ndarray] = {}
    newer: dict[int, np.ndarray] = {}
    for scope in {r.scope for r in m.records}:
        waiting[scope] = np.zeros((m.G, -(-m.L // scope)), bool)
        waiting[scope][w, lane // scope] = True
        newer[scope] = np.zeros(waiting[scope].shape, np.int32)
    keep: list[_AsyncRecord] = []
    for rec in reversed(m.records):
        s = rec.scope
        lands = waiting[s] & rec.issued & (newer[s] >= n)
        newer[s] += rec.issued
        land_lane = lands[rec.wg, rec.lane // s]
        if land_lane.any():
            _land(m, rec, land_lane)
        if not land_lane.all():
            keep.append(rec.rest(land_lane, rec.issued & ~lands))
    m.records = keep[::-1]
    # on cp.async the wait for all is commit_group + wait_group 0 (PTX ISA "cp.async.wait_all")
    m.commits[w, lane] += 1


def _async_commit(m: _Machine, v: Value, mask):
    """cp.async.commit_group: each active lane closes its open group of copies (an empty
    one where it issued none since its last commit; PTX ISA "cp.async.commit_group")."""
    m.commits[mask] += 1


def _async_wait_group(m: _Machine, v: Value, mask):
    """cp.async.wait_group n: each active lane waits until at most ``n`` of its committed
    groups are pending: its copies of every older group land; copies of its open group
    (issued since its last commit) are not waited for (PTX ISA "cp.async.wait_group").
    Per lane, as cp.async's groups are the executing thread's; gfx1250's copies (counted
    per wave) are not groups, and stay in flight."""
    n = v.arg
    keep: list[_AsyncRecord] = []
    for rec in m.records:
        if rec.scope != 1:
            keep.append(rec)
            continue
        land_lane = (mask[rec.wg, rec.lane]
                     & (rec.group < m.commits[rec.wg, rec.lane] - n))
        if land_lane.any():
            _land(m, rec, land_lane)
        if not land_lane.all():
            issued = rec.issued.copy()
            issued[rec.wg[land_lane], rec.lane[land_lane]] = False
            keep.append(rec.rest(land_lane, issued))
    m.records = keep


def _barrier(m: _Machine, v: Value, mask):
    per_wg = mask.sum(axis=1)
    partial = (per_wg > 0) & (per_wg < m.L)
    if partial.any():
        g = int(np.argmax(partial))
        m.fail(v, f"barrier reached by {int(per_wg[g])} of {m.L} lanes of workgroup "
                  f"{m.wg_name(g)} (divergent control flow)")
    hit = per_wg == m.L
    if hit.any():
        m.counts["barriers"] += 1
        if m.check_races:
            m.readers[hit] = _NONE
            m.writers[hit] = _NONE


def _matrix(m: _Machine, v: Value, mask):
    """D = C + A B per wave: gather the lanes into matrices with the lane maps of mma.py,
    multiply in float64 (f16/bf16 products are exact there; the sum of K products is
    rounded in float64), add C and round to f32 once; scatter D back with the same maps."""
    lay = _mma.layout(v.arg)
    W = lay.wave_size
    waves = mask.reshape(m.G, -1, W)
    active = waves.any(axis=-1)
    if (active & ~waves.all(axis=-1)).any():
        g, wv = (int(x[0]) for x in np.nonzero(active & ~waves.all(axis=-1)))
        m.fail(v, f"wave {wv} of workgroup {m.wg_name(g)} runs an MMA with part of its lanes "
                  "(EXEC must be all ones)")
    if not active.any():
        m.env[v.id] = m.zeros(v.dtype)
        return
    m.counts["mma_ops"] += 1
    abt = v.src[0].dtype
    shape = (m.G, m.L // W, W)

    def frag(x, n):
        return np.broadcast_to(x, (m.G, m.L, n)).reshape(*shape, n)

    a_raw, b_raw = frag(m.val(v.src[0]), lay.ab_elems), frag(m.val(v.src[1]), lay.ab_elems)
    if lay.ab_copies > 1:
        # gfx11: lanes 16-31 must hold a copy of lanes 0-15 (what the hardware does with
        # different halves is undocumented)
        for name, raw in (("A", a_raw), ("B", b_raw)):
            bits = raw.view(np.uint16)
            differ = (bits[:, :, 16:] != bits[:, :, :16]).any(axis=(-1, -2)) & active
            if differ.any():
                g, wv = (int(x[0]) for x in np.nonzero(differ))
                m.fail(v, f"gfx11 {name} fragment: lanes 16-31 differ from lanes 0-15 in wave "
                          f"{wv} of workgroup {m.wg_name(g)}")
    (a_row, a_k), (c_row, c_col) = lay.tables()
    A = np.zeros((*shape[:2], lay.m, lay.k))
    B = np.zeros((*shape[:2], lay.k, lay.n))
    C = np.zeros((*shape[:2], lay.m, lay.n))
    A[:, :, a_row, a_k] = _to_f64(a_raw, abt.base)
    B[:, :, a_k, a_row] = _to_f64(b_raw, abt.base)  # B: (k, col) with col = lane % 16
    C[:, :, c_row, c_col] = frag(m.val(v.src[2]), lay.c_elems)
    D = (C + A @ B).astype(np.float32)
    m.env[v.id] = D[:, :, c_row, c_col].reshape(m.G, m.L, lay.c_elems)


def _for(m: _Machine, v: Value, mask):
    r = v.arg
    start, stop, step = (m.val(s) for s in v.src[:3])
    carried = [m.val(s) for s in v.src[3:]]
    m.active_check(v, mask, step <= 0, "loop step must be positive")
    idx = np.broadcast_to(start, mask.shape).astype(start.dtype)
    while True:
        active = mask & (idx < stop)  # signed: the lowering's icmp slt
        if not active.any():
            break
        m.env[r.index.id] = idx
        for c, x in zip(r.carried, carried, strict=True):
            m.env[c.id] = x
        m.block(r.body, active)
        carried = [_where(active, m.val(y), x) for y, x in zip(r.yields, carried, strict=True)]
        idx = np.where(active, idx + step, idx).astype(idx.dtype)
    m.env[v.id] = carried  # read by LOOP_RESULT


def _if(m: _Machine, v: Value, mask):
    r = v.arg
    pred = np.broadcast_to(m.val(v.src[0]), mask.shape)
    if r.uniform:  # the lowering branches on one active lane's value: hold the promise
        grp = (pred & mask).reshape(m.G, -1, r.uniform)
        act = mask.reshape(m.G, -1, r.uniform)
        split = grp.any(axis=-1) & (grp != act).any(axis=-1)
        if split.any():
            g, wv = (int(x[0]) for x in np.nonzero(split))
            m.fail(v, f"wave-uniform if: the predicate differs within lanes "
                      f"{wv * r.uniform}-{(wv + 1) * r.uniform - 1} of workgroup "
                      f"{m.wg_name(g)}")
    then_mask, else_mask = mask & pred, mask & ~pred
    then_y = else_y = ()
    if then_mask.any():
        m.block(r.then, then_mask)
    then_y = [m.val(y) for y in r.then_yields]
    if r.else_ or r.else_yields:
        if else_mask.any():
            m.block(r.else_, else_mask)
        else_y = [m.val(y) for y in r.else_yields]
    m.env[v.id] = [_where(pred, a, b) for a, b in zip(then_y, else_y, strict=True)]


def _result(m: _Machine, v: Value, mask):
    m.env[v.id] = m.env[v.src[0].id][v.arg]


_HANDLERS = {
    **{op: _int_binary for op in GroupOp.IntBinary},
    **{op: _float_binary for op in GroupOp.FloatBinary},
    **{op: _unary for op in GroupOp.Unary},
    **{op: _compare for op in GroupOp.Comparison},
    **{op: _cast for op in GroupOp.Cast},
    Ops.SELECT: _select, Ops.FMA: _fma,
    Ops.VBUILD: _vbuild, Ops.VEXTRACT: _vextract, Ops.VINSERT: _vinsert,
    Ops.VSHUFFLE: _vshuffle,
    Ops.GEP: _gep, Ops.LOAD: _load, Ops.STORE: _store, Ops.ATOMIC_ADD: _atomic_add,
    Ops.ASYNC_COPY: _async_copy, Ops.ASYNC_COPY_ZFILL: _async_copy_zfill,
    Ops.ASYNC_WAIT: _async_wait, Ops.ASYNC_COMMIT: _async_commit,
    Ops.ASYNC_WAIT_GROUP: _async_wait_group, Ops.BARRIER: _barrier,
    Ops.BOUNDED_LOAD: _bounded_load, Ops.LDS_LOAD_TR: _lds_load_tr,
    Ops.MMA: _matrix, Ops.FOR: _for, Ops.IF: _if,
    Ops.LOOP_RESULT: _result, Ops.IF_RESULT: _result,
}


def emulate(kd: KernelDef, grid: tuple[int, int, int], args: dict, *, wg_batch: int = 64,
            check_races: bool = True) -> EmulationCounts:
    """Run ``kd`` on a grid of workgroups; pointer args are numpy arrays written in place.

    ``args`` maps every kernel argument name to a C-contiguous numpy array (pointers; byte
    addressed, any dtype) or a Python int/float (scalars). Workgroups run ``wg_batch`` at a
    time in linear order (x fastest); within a batch, all lanes of all workgroups run each
    op together. ``check_races=False`` skips LDS race tracking (faster; async copy checks
    and bounds stay on).
    """
    grid = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
    if any(g < 1 for g in grid):
        raise EmulationError(f"grid {grid} has an empty axis")
    if any(a.dtype.is_ptr and a.dtype.addrspace != GLOBAL for a in kd.args):
        raise EmulationError("pointer arguments must be global")
    m = _Machine(kd, grid, args, check_races)
    total = grid[0] * grid[1] * grid[2]
    batches = 0
    with np.errstate(all="ignore"):  # inactive lanes may divide by zero etc.: never used
        for s in range(0, total, wg_batch):
            m.run_batch(np.arange(s, min(total, s + wg_batch)))
            batches += 1
    return EmulationCounts(total, batches, **m.counts)

