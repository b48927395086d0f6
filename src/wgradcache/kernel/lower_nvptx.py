"""Lowering: KernelDef -> LLVM IR text for NVIDIA ``sm_90`` (LLVM's NVPTX backend).

The same walk as the AMDGPU lowering (``lower_common.Lowering``, one rule per op kind; the
structured regions, the predicated-memory branches, casts and vectors are shared); only the
target's own pieces differ, each defined here:

* module: triple ``nvptx64-nvidia-cuda``, NVPTX's data layout, no module flags;
* kernel: ``ptx_kernel`` calling convention and ``"nvvm.maxntid"="B"`` (B = block size: the
  PTX ``.maxntid`` directive, which caps ptxas's register allocation at 65536 / B per
  thread), and ``"nvvm.minctasm"="n"`` where the kernel names ``KernelDef.min_blocks``
  (``.minnctapersm``); pointer parameters stay ``ptr addrspace(1)`` (CUDA's generic and global
  addresses coincide, so the launcher passes the device address unchanged);
* shared memory: the IR's LDS is address space 3, NVPTX's ``.shared``; one
  ``addrspace(3)`` global per allocation, as on AMDGPU, while the kernel's LDS fits static
  shared memory (ptxas caps it at 48 KB: ``targets.py``); past that
  (``Target.lds_dynamic``) one ``external`` zero-length array, PTX's ``.extern .shared``
  (dynamic shared memory, sized at launch: the launcher opts in to it), each allocation
  at its aligned offset in it;
* ids: ``llvm.nvvm.read.ptx.sreg.{tid.x, ctaid.x|y|z}``;
* a wave-uniform ``if``: a plain branch (a warp that agrees does not diverge);
* barrier: ``llvm.nvvm.barrier.cta.sync.aligned.all(0)`` (``bar.sync 0``), which itself
  orders the CTA's shared and global accesses (PTX ISA 9.7.13.1 "bar"): no fences;
* atomics: f32 ``atomicrmw fadd ... syncscope("device") monotonic`` (``red``/``atom.add.f32``);
  packed ``<2 x half>`` / ``<2 x bfloat>`` through inline PTX
  ``red.relaxed.gpu.global.add.noftz.{f16x2,bf16x2}``: LLVM 22 turns the ``atomicrmw`` of
  a 32-bit vector into a compare-and-swap loop (probe, issue 19);
* async copy: the IR's zero-filling copy is ``cp.async.cg.shared.global`` (16 bytes) or
  ``.ca`` (4, 8: .cg takes 16 only), its src-size ``keep ? bytes : 0`` (PTX ISA "cp.async":
  the rest zero-filled); the wait ``cp.async.wait_all`` (commit_group + wait_group 0, the
  thread's own copies): only a wait for all, as the per-wave count of gfx1250's
  ``ASYNC_COPY`` (which does not lower here) and cp.async's groups differ for n > 0; a
  deeper ring counts groups: ``ASYNC_COMMIT`` is ``cp.async.commit_group`` and
  ``ASYNC_WAIT_GROUP n`` ``cp.async.wait_group n``;
* transposing LDS read: ``ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16`` (lane map
  ``mma.TRANSPOSED_READS``), its four registers bitcast to the IR's <8 x 16-bit>;
* MMA: the ``m16n8k16`` atom is two calls of the NVVM mma intrinsic (``mma.INTRINSICS``) whose
  registers are gathered from the IR's fragment slots as ``kernel/mma.py`` says
  (``MmaIntrinsic.a_regs`` / ``b_regs`` / ``c_slots``).

Deterministic: the same KernelDef gives the same text.
"""

from __future__ import annotations

from wgradcache.kernel import mma
from wgradcache.kernel.ir import Ops, Value
from wgradcache.kernel.lower_common import Lowering, LValue, align, const, hw_uses, ltype

__all__ = ["NV_TRIPLE", "NV_DATA_LAYOUT", "NvptxLowering", "lower_nvptx"]

NV_TRIPLE = "nvptx64-nvidia-cuda"
# LLVM 22's NVPTX64 data layout (the target machine's; a test compares them).
NV_DATA_LAYOUT = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"

_SREG = {"tid": "llvm.nvvm.read.ptx.sreg.tid.x",
         0: "llvm.nvvm.read.ptx.sreg.ctaid.x", 1: "llvm.nvvm.read.ptx.sreg.ctaid.y",
         2: "llvm.nvvm.read.ptx.sreg.ctaid.z"}
_BARRIER = "llvm.nvvm.barrier.cta.sync.aligned.all"
# PTX ISA 9.7.14.5.15 ldmatrix (sm_75+); IntrinsicsNVVM.td, shared-space pointer form
_LDMATRIX_X4_T = "llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.trans.b16.p3"
# cp.async with a src-size operand, per copy size (IntrinsicsNVVM.td; llc-22 selects
# cp.async.cg.shared.global [..], [..], 16, %r: probe in tests/kernel)
_CP_ASYNC = {4: "llvm.nvvm.cp.async.ca.shared.global.4.s",
             8: "llvm.nvvm.cp.async.ca.shared.global.8.s",
             16: "llvm.nvvm.cp.async.cg.shared.global.16.s"}
_CP_ASYNC_WAIT_ALL = "llvm.nvvm.cp.async.wait.all"
_CP_ASYNC_COMMIT = "llvm.nvvm.cp.async.commit.group"
_CP_ASYNC_WAIT_GROUP = "llvm.nvvm.cp.async.wait.group"  # its count an immarg i32
# packed 16-bit reductions: PTX ISA 9.7.13.6 "red" (.noftz.f16x2 sm_60+, .bf16x2 sm_90)
_RED_PACKED = {"f16": "red.relaxed.gpu.global.add.noftz.f16x2",
               "bf16": "red.relaxed.gpu.global.add.noftz.bf16x2"}


def lower_nvptx(kd, target: str) -> str:
    return NvptxLowering(kd, target).text()


class NvptxLowering(Lowering):
    triple = NV_TRIPLE
    datalayout = NV_DATA_LAYOUT
    module_tail: list[str] = []  # no AMDGPU module flags

    def kernel_prototype(self, ref: str, params: str) -> str:
        least = f' "nvvm.minctasm"="{self.kd.min_blocks}"' if self.kd.min_blocks else ""
        return (f'define ptx_kernel void {ref}({params}) "nvvm.maxntid"="{self.kd.block_size}"'
                + least)

    def declare_lds(self):
        """Static shared memory while it fits (the shared rule); past the static limit
        (``Target.lds_dynamic``) the allocations are offsets into one extern array."""
        total, offsets = 0, []
        for alloc in self.kd.lds:
            align = max(16, alloc.align)
            total = -(-total // align) * align
            offsets.append(total)
            total += alloc.nbytes
        if not self.target.lds_dynamic(total):
            super().declare_lds()
            return
        base = "@lds_dynamic"  # a plain name: the extern declaration's is not mangled
        self.lds_lines.append(f"{base} = external addrspace(3) global [0 x i8], align 16")
        for alloc, off in zip(self.kd.lds, offsets, strict=True):
            self.lds[alloc.name] = ("ptr addrspace(3)", base if off == 0 else (
                f"getelementptr inbounds (i8, ptr addrspace(3) {base}, i32 {off})"))

    def hw_ids(self):
        seen: dict[tuple, Value] = {}
        hw_uses(self.kd.body, seen)
        for key in sorted(seen, key=lambda k: (k[0], -1 if k[1] is None else k[1])):
            s = seen[key]
            name = _SREG["tid"] if s.op is Ops.THREAD_ID else _SREG[s.arg]
            self.values[s.id] = self.call(self.intrinsic(name, "i32", []), [], f"v{s.id}")

    def buffer_resources(self):
        """No buffer resources on NVIDIA: a bounded load is a range check and a load."""
        self.rsrc = {}

    def bounded_load(self, v: Value, name: str) -> LValue:
        """The IR's BOUNDED_LOAD without a buffer resource: ``off < num_bytes`` (unsigned)
        guards a plain load at base + off, zeros elsewhere. The IR's rule makes an access
        that crosses num_bytes an error, so on every valid access ``off < num_bytes`` is
        ``off + size <= num_bytes``; the planted 0x80000000 of an invalid element fails
        the unsigned compare. The branch is around one load: ptxas predicates it."""
        (pt, p), off, num = (self.val(s) for s in v.src[:3])
        ty = ltype(v.dtype)
        if len(v.src) == 4:  # the record starts ``start`` bytes into p
            start = self.cast("zext", self.val(v.src[3]), "i64", f"{name}.start")
            p = self.emit(f"{name}.base", pt, f"getelementptr i8, {pt} {p}, i64 {start[1]}")[1]
        ok = self.emit(f"{name}.ok", "i1", f"icmp ult i32 {off[1]}, {num[1]}")
        before = self.cur
        _, done = self.branch(ok, f"{name}.do", f"{name}.done")
        wide = self.cast("zext", off, "i64", f"{name}.off")
        at = self.emit(f"{name}.at", pt, f"getelementptr i8, {pt} {p}, i64 {wide[1]}")
        got = self.emit(f"{name}.ld", ty, f"load {ty}, {pt} {at[1]}{align(v.arg)}")
        then_block = self.cur
        self.br(done)
        self.position(done)
        return self.emit(name, ty, self.phi(ty, [(got, then_block),
                                                 ((ty, const(v.dtype, None)), before)]))

    def uniform_predicate(self, pred: LValue, r) -> LValue:
        """A warp-uniform ``if`` is a plain branch: a warp whose lanes agree does not
        diverge (ptxas may mark it ``bra.uni``); no readfirstlane exists here."""
        return pred

    def barrier(self, v: Value, name: str) -> None:
        self.call(self.intrinsic(_BARRIER, "void", ["i32"]), [("i32", "0")])

    def atomic_add(self, v: Value, name: str):
        (pt, p), (xt, x) = self.val(v.src[0]), self.val(v.src[1])
        dt = v.src[1].dtype
        if not dt.is_vector:
            return self.predicated(v, 2, lambda: self.void(
                f'atomicrmw fadd {pt} {p}, {xt} {x} syncscope("device") monotonic, align 4'))
        if dt.count != 2 or dt.scalar not in _RED_PACKED:
            self.fail(v, "packed atomics are <2 x half> or <2 x bfloat>")

        def emit():
            bits = self.cast("bitcast", (xt, x), "i32", f"{name}.bits")
            self.void(f'call void asm sideeffect "{_RED_PACKED[dt.scalar]} [$0], $1;", '
                      f'"l,r,~{{memory}}"({pt} {p}, i32 {bits[1]})')
        return self.predicated(v, 2, emit)

    def async_copy(self, v: Value, name: str) -> None:
        if v.op is not Ops.ASYNC_COPY_ZFILL or not self.target.async_zero_fill:
            self.fail(v, "the async copy here is cp.async with zero fill (ASYNC_COPY_ZFILL); "
                         "gfx1250's per-wave ASYNC_COPY does not exist on NVIDIA")
        (gt, g), (lt, d), keep = (self.val(s) for s in v.src)
        size = self.emit(f"{name}.size", "i32", f"select i1 {keep[1]}, i32 {v.arg}, i32 0")
        f = self.intrinsic(_CP_ASYNC[v.arg], "void", [lt, gt, "i32"])
        self.call(f, [(lt, d), (gt, g), size])

    def async_wait(self, v: Value, name: str) -> None:
        if v.arg != 0:
            self.fail(v, f"async_wait({v.arg}): only a wait for all (cp.async.wait_all)")
        self.call(self.intrinsic(_CP_ASYNC_WAIT_ALL, "void", []), [])

    def async_commit(self, v: Value, name: str) -> None:
        self.call(self.intrinsic(_CP_ASYNC_COMMIT, "void", []), [])

    def async_wait_group(self, v: Value, name: str) -> None:
        self.call(self.intrinsic(_CP_ASYNC_WAIT_GROUP, "void", ["i32"]), [("i32", str(v.arg))])

    def lds_load_tr(self, v: Value, name: str) -> LValue:
        """ldmatrix .x4 .trans: four 32-bit registers, register j holding slots 2j, 2j+1
        (``mma.TRANSPOSED_READS``), put together as the IR's <8 x 16-bit> vector."""
        if v.arg != "ldmatrix_x4_trans" or self.target.lds_read_tr != v.arg:
            self.fail(v, f"no {v.arg} on this target (its transposing read: "
                         f"{self.target.lds_read_tr or 'none'})")
        ret = "{i32, i32, i32, i32}"
        f = self.intrinsic(_LDMATRIX_X4_T, ret, ["ptr addrspace(3)"])
        d = self.call(f, [self.val(v.src[0])], f"{name}.m")
        regs = [self.emit(f"{name}.r{j}", "i32", f"extractvalue {ret} {d[1]}, {j}")
                for j in range(4)]
        vec = self.build("<4 x i32>", regs, f"{name}.v")
        return self.cast("bitcast", vec, ltype(v.dtype), name)

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
        (at, a), (bt, b), (ct, c) = (self.val(s) for s in v.src)
        el = ltype(ab.base)

        def reg(src: tuple[str, str], slots: tuple[int, ...], tag: str) -> tuple[str, str]:
            mask = ", ".join(f"i32 {i}" for i in slots)
            pair = self.emit(f"{name}.{tag}", f"<2 x {el}>",
                             f"shufflevector {src[0]} {src[1]}, {src[0]} poison, "
                             f"<2 x i32> <{mask}>")
            return self.cast("bitcast", pair, intr.reg, f"{name}.{tag}.i") \
                if intr.reg != pair[0] else pair

        a_regs = [reg((at, a), s, f"a{i}") for i, s in enumerate(intr.a_regs)]
        ret = "{" + ", ".join(["float"] * len(intr.c_slots[0])) + "}"
        params = [intr.reg] * (len(intr.a_regs) + len(intr.b_regs[0])) + \
            ["float"] * len(intr.c_slots[0])
        f = self.intrinsic(intr.name, ret, params)
        out: list[tuple[int, tuple[str, str]]] = []
        for h, (b_slots, c_slots) in enumerate(zip(intr.b_regs, intr.c_slots, strict=True)):
            b_regs = [reg((bt, b), s, f"b{h}{i}") for i, s in enumerate(b_slots)]
            cs = [self.emit(f"{name}.c{h}{i}", "float", f"extractelement {ct} {c}, i32 {s}")
                  for i, s in enumerate(c_slots)]
            d = self.call(f, a_regs + b_regs + cs, f"{name}.d{h}")
            for i, s in enumerate(c_slots):
                out.append((s, self.emit(f"{name}.d{h}.{i}", "float",
                                         f"extractvalue {ret} {d[1]}, {i}")))
        out.sort()
        return self.build(ltype(v.dtype), [x for _, x in out], name)

