"""Small hand-written LLVM IR kernels: the LDS probe, compile tests and the codegen benchmark.

The compile layer works on LLVM IR text and must be checkable without our kernel IR (which
is lowered elsewhere), so these kernels are written here directly. The intrinsic
declarations are the exact ones that selected in the LLVM 22 probe
(``llvm22-amdgpu-facts.md`` §1, §3); each kernel is a single ``amdgpu_kernel``.
"""

from __future__ import annotations

from dataclasses import dataclass

from wgradcache.kernel.mma import MmaIntrinsic, intrinsic, layout
from wgradcache.model.targets import get_target

__all__ = [
    "GemmSample",
    "MmaForm",
    "mma_form",
    "mma_kernel",
    "lds_kernel",
    "atomic_kernel",
    "gemm_kernel",
    "scratch_kernel",
]

_ATTRS = 'attributes #0 = {{ "amdgpu-flat-work-group-size"="1,{block}" }}'


@dataclass(frozen=True)
class MmaForm:
    """One matrix intrinsic as LLVM IR text: ``kernel.mma``'s intrinsic (name, argument
    list) with the operand types of its lane layout."""

    intrinsic: MmaIntrinsic
    ab_type: str  # e.g. "<16 x half>"
    c_type: str  # e.g. "<8 x float>"
    ab_elems: int
    c_elems: int
    k: int

    @property
    def name(self) -> str:
        """The full mangled intrinsic name, without '@'."""
        return self.intrinsic.name

    def _args(self, a: str, b: str, c: str) -> list[tuple[str, str]]:
        return self.intrinsic.args((self.ab_type, a), (self.ab_type, b), (self.c_type, c))

    def declare(self) -> str:
        types = ", ".join(t for t, _ in self._args("", "", ""))
        return f"declare {self.c_type} @{self.name}({types})"

    def call(self, dst: str, a: str, b: str, c: str) -> str:
        args = ", ".join(f"{t} {v}" for t, v in self._args(a, b, c))
        return f"  {dst} = call {self.c_type} @{self.name}({args})"


_LLVM_ELEM = {"f16": "half", "bf16": "bfloat", "i16": "i16"}


def mma_form(target: str, dtype: str = "fp16") -> MmaForm:
    """The intrinsic the target's atom uses, with the operand types that select (facts §1)."""
    atom = get_target(target).atom(dtype)
    if atom is None:
        raise ValueError(f"{target} has no MMA atom for {dtype}")
    lay = layout(atom.form)
    intr = intrinsic(atom.form, "f16" if dtype == "fp16" else "bf16")
    return MmaForm(intr, f"<{lay.ab_elems} x {_LLVM_ELEM[intr.operand]}>",
                   f"<{lay.c_elems} x float>", lay.ab_elems, lay.c_elems, lay.k)


def mma_kernel(target: str, dtype: str = "fp16", count: int = 1, name: str = "mma") -> str:
    """A kernel that loads A/B fragments per lane, chains ``count`` MMAs and stores D."""
    f = mma_form(target, dtype)
    block = get_target(target).wave_size
    lines = [
        f"define amdgpu_kernel void @{name}(ptr addrspace(1) noalias %a, "
        "ptr addrspace(1) noalias %b, ptr addrspace(1) noalias %d) #0 {",
        "entry:",
        "  %tid = call i32 @llvm.amdgcn.workitem.id.x()",
        f"  %pa = getelementptr {f.ab_type}, ptr addrspace(1) %a, i32 %tid",
        f"  %pb = getelementptr {f.ab_type}, ptr addrspace(1) %b, i32 %tid",
        f"  %pd = getelementptr {f.c_type}, ptr addrspace(1) %d, i32 %tid",
        f"  %va = load {f.ab_type}, ptr addrspace(1) %pa, align 16",
        f"  %vb = load {f.ab_type}, ptr addrspace(1) %pb, align 16",
    ]
    acc = "zeroinitializer"
    for i in range(count):
        lines.append(f.call(f"%c{i}", "%va", "%vb", acc))
        acc = f"%c{i}"
    lines += [f"  store {f.c_type} {acc}, ptr addrspace(1) %pd, align 16", "  ret void", "}",
              f.declare(), "declare i32 @llvm.amdgcn.workitem.id.x()", _ATTRS.format(block=block)]
    return "\n".join(lines) + "\n"


def lds_kernel(lds_bytes: int, name: str = "k") -> str:
    """A kernel whose one LDS array is ``lds_bytes`` long; each lane writes a byte of it.

    The store index depends on the lane, so codegen cannot drop the array: the code object's
    group segment then equals ``lds_bytes`` exactly (facts §4).
    """
    return f"""@lds = internal addrspace(3) global [{lds_bytes} x i8] poison, align 4

define amdgpu_kernel void @{name}(ptr addrspace(1) %out) #0 {{
entry:
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %p = getelementptr i8, ptr addrspace(3) @lds, i32 %tid
  %v = trunc i32 %tid to i8
  store i8 %v, ptr addrspace(3) %p, align 1
  call void @llvm.amdgcn.s.barrier()
  %q = getelementptr i8, ptr addrspace(3) @lds, i32 {max(lds_bytes - 1, 0)}
  %r = load i8, ptr addrspace(3) %q, align 1
  %po = getelementptr i8, ptr addrspace(1) %out, i32 %tid
  store i8 %r, ptr addrspace(1) %po, align 1
  ret void
}}

declare i32 @llvm.amdgcn.workitem.id.x()
declare void @llvm.amdgcn.s.barrier()
{_ATTRS.format(block=256)}
"""


def atomic_kernel(value_type: str = "<2 x half>", ordering: str = "monotonic",
                  name: str = "k") -> str:
    """``atomicrmw fadd`` at agent scope with a per-lane pointer and value (facts §2).

    The value and pointer are divergent, so the atomic optimizer cannot reduce it to one lane.
    """
    return f"""define amdgpu_kernel void @{name}(ptr addrspace(1) %p, ptr addrspace(1) %v) #0 {{
entry:
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %pv = getelementptr {value_type}, ptr addrspace(1) %v, i32 %tid
  %x = load {value_type}, ptr addrspace(1) %pv, align 4
  %pp = getelementptr {value_type}, ptr addrspace(1) %p, i32 %tid
  %old = atomicrmw fadd ptr addrspace(1) %pp, {value_type} %x syncscope("agent") {ordering}, align 4
  ret void
}}

declare i32 @llvm.amdgcn.workitem.id.x()
{_ATTRS.format(block=256)}
"""


def scratch_kernel(name: str = "k") -> str:
    """A 64-byte private array indexed by kernel arguments: it stays in scratch.

    The accesses are volatile so codegen's alloca promotion cannot move the array into
    registers or LDS; the code object then reports a private segment of at least 64 bytes.
    """
    return f"""define amdgpu_kernel void @{name}(ptr addrspace(1) %out, i32 %i, i32 %j) {{
entry:
  %buf = alloca [16 x i32], align 4, addrspace(5)
  %p = getelementptr [16 x i32], ptr addrspace(5) %buf, i32 0, i32 %i
  store volatile i32 %i, ptr addrspace(5) %p, align 4
  %q = getelementptr [16 x i32], ptr addrspace(5) %buf, i32 0, i32 %j
  %v = load volatile i32, ptr addrspace(5) %q, align 4
  store i32 %v, ptr addrspace(1) %out, align 4
  ret void
}}
"""


class _Ssa:
    """Fresh SSA names and collected lines for the generated GEMM body."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._n = 0

    def __call__(self, text: str) -> str:
        self._n += 1
        name = f"%t{self._n}"
        self.lines.append(f"  {name} = {text}")
        return name

    def emit(self, text: str) -> None:
        self.lines.append(f"  {text}")


@dataclass(frozen=True)
class GemmSample:
    """The main loop ``gemm_kernel`` writes: dtype, CTA tile, warps, and the instruction
    mix (async copies, an atomic epilogue)."""

    dtype: str = "fp16"
    tile_m: int = 128
    tile_n: int = 128
    tile_k: int = 64
    warps_m: int = 2
    warps_n: int = 2
    async_copy: bool = False
    atomic: bool = False
    name: str = "gemm"


@dataclass(frozen=True)
class _Gemm:
    """What the parts of one ``gemm_kernel`` share: the sample, its MMA form, the figures
    derived from them and the SSA names of the entry block's ids."""

    g: GemmSample
    f: MmaForm
    elem: str
    block: int
    subtiles: tuple[int, int]  # MMA sub-tiles per wave along M and N
    ksub: int  # MMA k steps per K tile
    loads: tuple[int, int]  # 16-byte copies per thread of A and B
    tid: str
    row0: str
    lane: str
    warp_rc: tuple[str, str]  # the wave's row and column in the CTA


def gemm_kernel(target: str, sample: GemmSample = GemmSample()) -> str:
    """A GEMM main loop of realistic size for timing codegen: global -> LDS -> MMA.

    Each K step copies an A and a B tile into LDS with 16-byte accesses (a register round
    trip, or ``global.load.async.to.lds.b128`` + ``s.wait.asynccnt`` with ``async_copy``),
    waits at a barrier, loads fragments from LDS and issues every MMA of the wave's sub-tile,
    then barriers again. The epilogue stores D as 16-bit values, or adds it with packed
    ``atomicrmw fadd <2 x half>`` (agent, monotonic). Lane maps are not meant to be right;
    only the instruction mix and register pressure are.
    """
    g = sample
    t = get_target(target)
    f = mma_form(target, g.dtype)
    wave = t.wave_size
    block = wave * g.warps_m * g.warps_n
    wm, wn = g.tile_m // g.warps_m, g.tile_n // g.warps_n
    am, an, ksub = wm // 16, wn // 16, g.tile_k // f.k
    elem = "half" if g.dtype == "fp16" else "bfloat"
    bytes_a, bytes_b = g.tile_m * g.tile_k * 2, g.tile_n * g.tile_k * 2
    loads_a, loads_b = bytes_a // 16 // block, bytes_b // 16 // block
    if min(am, an, ksub, loads_a, loads_b) < 1:
        raise ValueError("tile too small for this block")
    s = _Ssa()
    tid = s("call i32 @llvm.amdgcn.workitem.id.x()")
    bid = s("call i32 @llvm.amdgcn.workgroup.id.x()")
    lane = s(f"and i32 {tid}, {wave - 1}")
    warp = s(f"lshr i32 {tid}, {wave.bit_length() - 1}")
    wrow = s(f"and i32 {warp}, {g.warps_m - 1}")
    wcol = s(f"lshr i32 {warp}, {(g.warps_m - 1).bit_length()}")
    row0 = s(f"mul i32 {bid}, {g.tile_m}")
    entry = list(s.lines)
    s.lines.clear()
    k = _Gemm(g, f, elem, block, (am, an), ksub, (loads_a, loads_b), tid, row0, lane,
              (wrow, wcol))

    accs = [(i, j) for i in range(am) for j in range(an)]
    phis = [f"  %acc{i}_{j} = phi {f.c_type} [zeroinitializer, %entry], [%acc{i}_{j}.n, %loop]"
            for i, j in accs]
    _gemm_copies(s, k)
    s.emit("call void @llvm.amdgcn.s.barrier()")
    _gemm_mmas(s, k, accs)
    s.emit("call void @llvm.amdgcn.s.barrier()")
    body = s.lines
    s.lines = []
    epilogue = _gemm_epilogue(k, accs)

    decls = [f.declare(), "declare i32 @llvm.amdgcn.workitem.id.x()",
             "declare i32 @llvm.amdgcn.workgroup.id.x()", "declare void @llvm.amdgcn.s.barrier()"]
    if g.async_copy:
        decls += ["declare void @llvm.amdgcn.global.load.async.to.lds.b128(ptr addrspace(1), "
                  "ptr addrspace(3), i32 immarg, i32 immarg)",
                  "declare void @llvm.amdgcn.s.wait.asynccnt(i16 immarg)"]
    out = [
        f"@lds_a = internal addrspace(3) global [{bytes_a} x i8] poison, align 16",
        f"@lds_b = internal addrspace(3) global [{bytes_b} x i8] poison, align 16",
        "",
        f"define amdgpu_kernel void @{g.name}(ptr addrspace(1) noalias %a, "
        "ptr addrspace(1) noalias %b, ptr addrspace(1) noalias %d, i32 %K) #0 {",
        "entry:", *entry, "  br label %loop", "loop:",
        "  %k = phi i32 [0, %entry], [%k.n, %loop]", *phis, *body,
        f"  %k.n = add i32 %k, {g.tile_k}",
        "  %more = icmp ult i32 %k.n, %K",
        "  br i1 %more, label %loop, label %exit",
        "exit:", *epilogue, "  ret void", "}", "", *decls, _ATTRS.format(block=block),
    ]
    return "\n".join(out) + "\n"


def _gemm_copies(s: _Ssa, k: _Gemm) -> None:
    """One K step's copies of the A and B tiles into LDS, 16 bytes per access."""
    kk, elem, async_copy = "%k", k.elem, k.g.async_copy
    for op, nloads, lds in (("a", k.loads[0], "@lds_a"), ("b", k.loads[1], "@lds_b")):
        for i in range(nloads):
            lin = s(f"add i32 {k.tid}, {i * k.block}")
            off = s(f"mul i32 {lin}, 8")
            goff = s(f"add i32 {off}, {kk}")
            goff2 = s(f"add i32 {goff}, {k.row0}")
            src = s(f"getelementptr {elem}, ptr addrspace(1) %{op}, i32 {goff2}")
            dst = s(f"getelementptr {elem}, ptr addrspace(3) {lds}, i32 {off}")
            if async_copy:
                s.emit("call void @llvm.amdgcn.global.load.async.to.lds.b128("
                       f"ptr addrspace(1) {src}, ptr addrspace(3) {dst}, i32 0, i32 0)")
            else:
                v = s(f"load <8 x {elem}>, ptr addrspace(1) {src}, align 16")
                s.emit(f"store <8 x {elem}> {v}, ptr addrspace(3) {dst}, align 16")
    if async_copy:
        s.emit("call void @llvm.amdgcn.s.wait.asynccnt(i16 0)")


def _gemm_mmas(s: _Ssa, k: _Gemm, accs: list[tuple[int, int]]) -> None:
    """Per K sub-step: the wave's A and B fragments from LDS, then every MMA of its
    sub-tile, each accumulator chained into the next step (the last feeds the loop phi)."""
    f, ksub, tile_k, lane = k.f, k.ksub, k.g.tile_k, k.lane
    cur = {ij: f"%acc{ij[0]}_{ij[1]}" for ij in accs}
    frag_bytes = f.ab_elems * 2
    for kstep in range(ksub):
        frags: tuple[list[str], list[str]] = ([], [])
        for count, sub, lds, out in zip(k.subtiles, k.warp_rc, ("@lds_a", "@lds_b"), frags,
                                        strict=True):
            for i in range(count):
                base = s(f"mul i32 {sub}, {count * 16 * tile_k * 2}")
                lo = s(f"mul i32 {lane}, {frag_bytes}")
                o1 = s(f"add i32 {base}, {lo}")
                o2 = s(f"add i32 {o1}, {(i * 16 * tile_k + kstep * f.k) * 2}")
                p = s(f"getelementptr i8, ptr addrspace(3) {lds}, i32 {o2}")
                out.append(s(f"load {f.ab_type}, ptr addrspace(3) {p}, align 16"))
        for i, j in accs:
            dst = f"%acc{i}_{j}.n" if kstep == ksub - 1 else f"%m{kstep}_{i}_{j}"
            s.lines.append(f.call(dst, frags[0][i], frags[1][j], cur[(i, j)]))
            cur[(i, j)] = dst


def _gemm_epilogue(k: _Gemm, accs: list[tuple[int, int]]) -> list[str]:
    """D as 16-bit values: stored, or added with packed ``atomicrmw fadd`` pairs."""
    f, elem, block = k.f, k.elem, k.block
    epi = _Ssa()
    epi._n = 100000
    half_c = f.c_elems // 2
    for idx, (i, j) in enumerate(accs):
        acc = f"%acc{i}_{j}.n"
        base = epi(f"mul i32 {k.tid}, {f.c_elems}")
        off = epi(f"add i32 {base}, {idx * block * f.c_elems}")
        off = epi(f"add i32 {off}, {k.row0}")
        cvt = epi(f"fptrunc {f.c_type} {acc} to <{f.c_elems} x {elem}>")
        if k.g.atomic:
            for pair in range(half_c):
                v = epi(f"shufflevector <{f.c_elems} x {elem}> {cvt}, <{f.c_elems} x {elem}> "
                        f"poison, <2 x i32> <i32 {2 * pair}, i32 {2 * pair + 1}>")
                o = epi(f"add i32 {off}, {2 * pair}")
                p = epi(f"getelementptr {elem}, ptr addrspace(1) %d, i32 {o}")
                epi(f"atomicrmw fadd ptr addrspace(1) {p}, <2 x {elem}> {v} "
                    'syncscope("agent") monotonic, align 4')
        else:
            p = epi(f"getelementptr {elem}, ptr addrspace(1) %d, i32 {off}")
            epi.emit(f"store <{f.c_elems} x {elem}> {cvt}, ptr addrspace(1) {p}, align 16")
    return epi.lines
