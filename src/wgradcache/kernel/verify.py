"""verify(kernel): the IR's validity rules, checked once, apart from the builder.

The builder already refuses most mistakes as they are made; this pass re-checks a finished
``KernelDef`` from scratch (types, address spaces, dominance of values in structured
regions), so a kernel built or transformed by other means is held to the same rules before
it reaches the lowering or the emulator.
"""

from __future__ import annotations

from wgradcache.kernel import mma as _mma
from wgradcache.kernel.ir import (
    FCMP_PREDICATES,
    GLOBAL,
    ICMP_PREDICATES,
    LDS,
    GroupOp,
    KernelDef,
    Ops,
    Value,
    bf16,
    f16,
    f32,
    i1,
    i32,
    i64,
    void,
)

__all__ = ["VerifyError", "verify"]


class VerifyError(ValueError):
    """The kernel breaks an IR rule; the message names the value and the rule."""


def verify(kd: KernelDef) -> None:
    """Raise ``VerifyError`` on the first broken rule; return None when the kernel is valid."""
    if not 1 <= kd.block_size <= 1024:
        raise VerifyError(f"{kd.name}: block_size {kd.block_size}")
    if len({a.name for a in kd.args}) != len(kd.args):
        raise VerifyError(f"{kd.name}: duplicate argument names")
    if len({a.name for a in kd.lds}) != len(kd.lds):
        raise VerifyError(f"{kd.name}: duplicate LDS allocation names")
    if len(kd.arg_values) != len(kd.args):
        raise VerifyError(f"{kd.name}: {len(kd.arg_values)} ARG values for {len(kd.args)} args")
    for i, (a, v) in enumerate(zip(kd.args, kd.arg_values, strict=False)):
        if v.op is not Ops.ARG or v.arg != i or v.dtype != a.dtype:
            raise VerifyError(f"{kd.name}: ARG value {v!r} does not match argument {a.name}")
    _Verifier(kd).block(kd.body)


class _Verifier:
    def __init__(self, kd: KernelDef):
        self.kd = kd
        self.seen: set[int] = set()
        self.scope: set[int] = set()  # ids of the statements that dominate the current one
        self.globals_ok: set[int] = set()
        self.lds_names = {a.name for a in kd.lds}
        self.checks = {op: getattr(self, name) for op, name in _CHECKS.items()}  # op -> rule

    def fail(self, v: Value, msg: str):
        raise VerifyError(f"{self.kd.name}: {v.op.name} %{v.id} ({v.dtype!r}): {msg}")

    def use(self, v: Value, s: Value):
        if s.id in self.scope or s.id in self.globals_ok:
            return
        if s.op in GroupOp.GlobalDefs:
            self.global_def(s)
            self.globals_ok.add(s.id)
        else:
            self.fail(v, f"uses %{s.id} ({s.op.name}) which does not dominate it")

    def global_def(self, s: Value):
        if s.op is Ops.ARG and (not 0 <= s.arg < len(self.kd.args)
                                or self.kd.arg_values[s.arg] is not s):
            self.fail(s, "is not an argument of this kernel")
        if s.op is Ops.LDS_ALLOC and (s.arg not in self.lds_names or s.dtype.addrspace != LDS):
            self.fail(s, f"no LDS allocation {s.arg!r}")
        if s.op is Ops.WORKGROUP_ID and s.arg not in (0, 1, 2):
            self.fail(s, f"axis {s.arg}")

    def region(self, v: Value, defs, stmts, yields):
        """Check a nested block; its definitions go out of scope when it ends."""
        added = [d.id for d in defs]
        self.scope.update(added)
        added += self.block(stmts)
        for y in yields:
            self.use(v, y)
        self.scope.difference_update(added)

    def block(self, stmts: tuple[Value, ...]) -> list[int]:
        added = []
        seen, scope, checks = self.seen, self.scope, self.checks
        for v in stmts:
            if v.op in _NOT_STATEMENTS:
                self.fail(v, "is not a statement")
            if v.id in seen:
                self.fail(v, "appears twice")
            seen.add(v.id)
            for s in v.src:
                self.use(v, s)
            checks.get(v.op, self.check_unknown)(v)
            if v.op is Ops.FOR:
                r = v.arg
                self.region(v, (r.index, *r.carried), r.body, r.yields)
            elif v.op is Ops.IF:
                r = v.arg
                self.region(v, (), r.then, r.then_yields)
                self.region(v, (), r.else_, r.else_yields)
            scope.add(v.id)
            added.append(v.id)
        return added

    def check_unknown(self, v: Value):
        self.fail(v, "unknown op")

    def check_alu(self, v: Value):
        op, dt, src = v.op, v.dtype, v.src
        binary = op in GroupOp.Binary
        if len(src) != (2 if binary else 1) or any(s.dtype != dt for s in src):
            self.fail(v, f"operands {[s.dtype for s in src]}")
        want_int = op in GroupOp.IntBinary or op is Ops.NOT
        if not (dt.is_int if want_int else dt.is_float):
            self.fail(v, "wrong operand kind")

    def check_compare(self, v: Value):
        preds = ICMP_PREDICATES if v.op is Ops.ICMP else FCMP_PREDICATES
        a, b = v.src
        if v.arg not in preds or a.dtype != b.dtype or v.dtype != i1.vec(a.dtype.count):
            self.fail(v, f"bad compare {v.arg!r} of {a.dtype!r}, {b.dtype!r}")
        if not (a.dtype.is_int if v.op is Ops.ICMP else a.dtype.is_float):
            self.fail(v, "wrong operand kind")

    def check_select(self, v: Value):
        c, a, b = v.src
        if a.dtype != v.dtype or b.dtype != v.dtype or c.dtype.scalar != "i1" or \
                c.dtype.count not in (1, v.dtype.count):
            self.fail(v, "bad select operands")

    def check_fma(self, v: Value):
        if not v.dtype.is_float or len(v.src) != 3 or any(s.dtype != v.dtype for s in v.src):
            self.fail(v, "bad fma operands")

    def check_gep(self, v: Value):
        p, idx = v.src
        if not p.dtype.is_ptr or v.dtype != p.dtype or idx.dtype not in (i32, i64):
            self.fail(v, f"gep of {p.dtype!r} by {idx.dtype!r}")

    def check_sync(self, v: Value):
        if v.src or v.dtype != void:
            self.fail(v, "takes no operands")
        counted = v.op in (Ops.ASYNC_WAIT, Ops.ASYNC_WAIT_GROUP)
        if counted and not (isinstance(v.arg, int) and 0 <= v.arg < 64):
            self.fail(v, f"count {v.arg!r}")

    def check_mma(self, v: Value):
        lay = _mma.LAYOUTS.get(v.arg)
        if lay is None:
            self.fail(v, f"unknown form {v.arg!r}")
        a, b, c = v.src
        if (a.dtype.base not in (f16, bf16) or a.dtype != a.dtype.base.vec(lay.ab_elems)
                or b.dtype != a.dtype or c.dtype != f32.vec(lay.c_elems) or v.dtype != c.dtype):
            self.fail(v, f"operands {a.dtype!r}, {b.dtype!r}, {c.dtype!r} for {v.arg}")
        if self.kd.block_size % lay.wave_size:
            self.fail(v, f"block_size {self.kd.block_size} not a multiple of the wave")

    def check_for(self, v: Value):
        start, stop, step, *inits = v.src
        r = v.arg
        if start.dtype not in (i32, i64) or stop.dtype != start.dtype or \
                step.dtype != start.dtype or r.index.dtype != start.dtype:
            self.fail(v, "loop bounds must be one of i32/i64")
        if [i.dtype for i in inits] != [c.dtype for c in r.carried] or \
                [y.dtype for y in r.yields] != [c.dtype for c in r.carried]:
            self.fail(v, "carried values, inits and yields disagree")

    def check_if(self, v: Value):
        r = v.arg
        if v.src[0].dtype != i1 or \
                [y.dtype for y in r.then_yields] != [y.dtype for y in r.else_yields]:
            self.fail(v, "bad predicate or yields")
        u = r.uniform
        if not isinstance(u, int) or u < 0 or u & (u - 1):
            self.fail(v, f"uniform={u!r}: 0 or a power of two lane count")

    def check_lds_load_tr(self, v: Value):
        (p,) = v.src
        if not (p.dtype.is_ptr and p.dtype.addrspace == LDS and p.dtype.elem.bits == 16
                and v.dtype == p.dtype.elem.vec(8) and v.arg in _mma.TRANSPOSED_READS):
            self.fail(v, f"transposing LDS load of {v.dtype!r} through {p.dtype!r}")

    def check_bounded_load(self, v: Value):
        """Base a global pointer argument, the offset, num_bytes and the record's start
        (optional fourth operand) i32; the width one buffer load moves. That num_bytes and
        the start are equal over the workgroup is a run-time fact: the emulator checks it."""
        if len(v.src) not in (3, 4):
            self.fail(v, f"{len(v.src)} operands (base, byte offset, num_bytes[, start])")
        p, off, n = v.src[:3]
        if not (p.op is Ops.ARG and p.dtype.is_ptr and p.dtype.addrspace == GLOBAL):
            self.fail(v, f"base {p!r} is not a global pointer argument")
        if off.dtype != i32 or n.dtype != i32 or any(s.dtype != i32 for s in v.src[3:]):
            self.fail(v, f"offset {off.dtype!r} / num_bytes {n.dtype!r} / start: i32")
        if v.dtype.base != p.dtype.elem or v.dtype.nbytes not in (1, 2, 4, 8, 12, 16) or \
                _bad_align(v.arg):
            self.fail(v, f"bounded load of {v.dtype!r} through {p.dtype!r}, align {v.arg}")

    def check_result(self, v: Value):
        (node,) = v.src
        want = Ops.FOR if v.op is Ops.LOOP_RESULT else Ops.IF
        slots = node.arg.carried if want is Ops.FOR else node.arg.then_yields
        if node.op is not want or not 0 <= v.arg < len(slots) or slots[v.arg].dtype != v.dtype:
            self.fail(v, "does not project a slot of its region")

    def check_cast(self, v: Value):
        (s,) = v.src
        a, b = s.dtype, v.dtype
        op = v.op
        if op is Ops.PTR_CAST:
            if not (a.is_ptr and b.is_ptr and a.addrspace == b.addrspace):
                self.fail(v, f"ptr_cast {a!r} -> {b!r}")
            return
        if op is Ops.BITCAST:
            if a.is_ptr or b.is_ptr or a.bits * a.count != b.bits * b.count:
                self.fail(v, f"bitcast {a!r} -> {b!r}")
            return
        if a.count != b.count:
            self.fail(v, f"cast changes the lane count {a!r} -> {b!r}")
        ok = {
            Ops.FPCAST: a.is_float and b.is_float and a != b,
            Ops.SITOFP: a.is_int and b.is_float, Ops.UITOFP: a.is_int and b.is_float,
            Ops.FPTOSI: a.is_float and b.is_int, Ops.FPTOUI: a.is_float and b.is_int,
            Ops.TRUNC: a.is_int and b.is_int and b.bits < a.bits,
            Ops.ZEXT: a.is_int and b.is_int and b.bits > a.bits,
            Ops.SEXT: a.is_int and b.is_int and b.bits > a.bits,
        }[op]
        if not ok:
            self.fail(v, f"{op.name} {a!r} -> {b!r}")

    def check_vector(self, v: Value):
        op, dt, src = v.op, v.dtype, v.src
        if op is Ops.VBUILD:
            if dt.count != len(src) or any(s.dtype != dt.base for s in src):
                self.fail(v, "elements do not match the vector type")
        elif op is Ops.VEXTRACT:
            if not (src[0].dtype.is_vector and dt == src[0].dtype.base
                    and 0 <= v.arg < src[0].dtype.count):
                self.fail(v, f"extract {v.arg}")
        elif op is Ops.VINSERT:
            if not (src[0].dtype == dt and src[1].dtype == dt.base and 0 <= v.arg < dt.count):
                self.fail(v, f"insert {v.arg}")
        else:
            a, b = src
            n = a.dtype.count
            if a.dtype != b.dtype or dt != a.dtype.base.vec(len(v.arg)) or any(
                    not 0 <= m < 2 * n for m in v.arg):
                self.fail(v, f"shuffle {v.arg}")

    def check_memory(self, v: Value):
        op, src = v.op, v.src
        n_fixed = 1 if op is Ops.LOAD else 3 if op is Ops.ASYNC_COPY_ZFILL else 2
        predicated = op in GroupOp.Predicated
        if len(src) not in ((n_fixed, n_fixed + 1) if predicated else (n_fixed,)):
            self.fail(v, f"{len(src)} operands")
        if (len(src) == n_fixed + 1 or not predicated) and src[-1].dtype != i1:
            self.fail(v, f"predicate {src[-1].dtype!r}")
        if not src[0].dtype.is_ptr:
            self.fail(v, f"address {src[0].dtype!r} is not a pointer")
        why = _MEMORY_RULES[op](v, src[0].dtype)
        if why:
            self.fail(v, why)


def _load_rule(v: Value, p) -> str:
    if v.dtype.base != p.elem or _bad_align(v.arg):
        return f"load of {v.dtype!r} through {p!r}, align {v.arg}"
    return ""


def _store_rule(v: Value, p) -> str:
    if v.src[1].dtype.base != p.elem or v.dtype != void or _bad_align(v.arg):
        return f"store of {v.src[1].dtype!r} through {p!r}"
    return ""


def _atomic_rule(v: Value, p) -> str:
    val = v.src[1].dtype
    if p.addrspace != GLOBAL or val not in (f32, f16.vec(2), bf16.vec(2)) or val.base != p.elem:
        return f"atomic add of {val!r} through {p!r}"
    return ""


def _async_copy_rule(v: Value, p) -> str:
    dst = v.src[1].dtype
    if p.addrspace != GLOBAL or not dst.is_ptr or dst.addrspace != LDS or v.arg not in (4, 8, 16):
        return f"async copy {p!r} -> {dst!r}, {v.arg} bytes"
    return ""


# Memory op -> its rule: the reason it is malformed, "" when it is not.
_MEMORY_RULES = {Ops.LOAD: _load_rule, Ops.STORE: _store_rule, Ops.ATOMIC_ADD: _atomic_rule,
                 Ops.ASYNC_COPY: _async_copy_rule, Ops.ASYNC_COPY_ZFILL: _async_copy_rule}

_NOT_STATEMENTS = GroupOp.GlobalDefs | GroupOp.RegionDefs
# op -> checker method (one dict lookup per statement instead of a chain of set tests)
_CHECKS = {
    **{op: "check_alu" for op in GroupOp.Binary | GroupOp.Unary},
    **{op: "check_compare" for op in GroupOp.Comparison},
    **{op: "check_cast" for op in GroupOp.Cast},
    **{op: "check_vector" for op in GroupOp.Vector},
    **{op: "check_memory" for op in GroupOp.Memory},
    **{op: "check_sync" for op in GroupOp.Sync},
    Ops.SELECT: "check_select", Ops.FMA: "check_fma", Ops.GEP: "check_gep",
    Ops.MMA: "check_mma", Ops.FOR: "check_for", Ops.IF: "check_if",
    Ops.BOUNDED_LOAD: "check_bounded_load", Ops.LDS_LOAD_TR: "check_lds_load_tr",
    Ops.LOOP_RESULT: "check_result", Ops.IF_RESULT: "check_result",
}


def _bad_align(a) -> bool:
    return not isinstance(a, int) or a < 1 or a & (a - 1) != 0
