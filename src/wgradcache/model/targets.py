"""The target catalog: what each GPU admits (AMD gfx targets and NVIDIA sm_90), with where
each fact comes from.

Every capability question (does gfx1151 have native packed fp16 atomics? how much LDS may a
kernel allocate on gfx1201?) is answered here and nowhere else. The walk, the validator,
``count`` and ``select`` ask the catalog; none of them hard-codes a target name.

Sources are cited per fact. "probe" means a compile probe through LLVM 22 (llvmlite 0.50 /
Debian llc-22), recorded in ``shared/reference/llvm22-amdgpu-facts.md`` and re-checked by
``tests/compile/test_lds_probe.py`` on this machine, which compiles an LDS allocation of
exactly the limit and of the limit + 4 bytes for each target.

The device sizes (CU and XCD counts, ``Target.cu_count``) live in ``devices.py``: they rank
launches and never change a kernel, and this module is in the generator digest.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["CODE_OBJECT_VERSION", "MmaAtom", "Target", "TARGETS", "code_object_version_flag",
           "get_target", "target_names", "kernel_target_names"]

CODE_OBJECT_VERSION = 5
"""AMDHSA code object version of every kernel, on every target: the lowering writes its
module flag, ``compile.codegen.CodegenOptions`` accepts no other and the toolchain identity
records it.

Chosen on purpose rather than taken from LLVM: LLVM 22 defaults to v6 (``EI_ABIVERSION``
4); ROCm loaders older than 6.x only read up to v5, and v5 carries everything our kernels
need (hidden kernel arguments, the kernel descriptor layout). The module flag
``amdhsa_code_object_version`` = 500 selects it (llvm22-amdgpu-facts.md §5, checked on
gfx942 and gfx1250).
"""


def code_object_version_flag(version: int) -> int:
    """The ``amdhsa_code_object_version`` module flag value that selects ``version`` (5 ->
    500): what the lowering writes and ``compile.toolchain.with_code_object_version`` adds."""
    return version * 100


@dataclass(frozen=True)
class MmaAtom:
    """One matrix instruction shape: D[m,n] += A[m,k] B[k,n] per wave.

    ``form`` names the operand form the lowering and the lane maps key on:
    ``gfx1250`` (16x16x32, 16 elements per lane, no duplication), ``gfx12`` (16x16x16, 8 per
    lane), ``gfx11`` (16x16x16, 16 per lane, lanes 16-31 duplicate 0-15), ``mfma`` (wave64
    16x16x16, 4 per lane), ``mfma_k32`` (wave64 16x16x32, 8 per lane; gfx950 only),
    ``m16n8k16`` (NVIDIA: a 16x16x16 atom made of two ``mma.sync.m16n8k16`` instructions,
    8 A/B elements and 8 accumulators per lane).
    Its LLVM intrinsic per A/B dtype is ``kernel.mma.intrinsic(form, ...)``.
    """

    m: int
    n: int
    k: int
    form: str

    @property
    def shape(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"


@dataclass(frozen=True)
class Target:
    """Capabilities of one target, each with a source (see module docstring)."""

    name: str
    family: str  # "wmma", "mfma" or "mma" (NVIDIA)
    wave_size: int
    atoms: dict[str, MmaAtom]  # A/B dtype -> the atom the kernels use
    lds_bytes: int  # the most one workgroup may allocate (on sm_90 the opt-in limit)
    async_lds_copy: bool
    packed_atomics_native: bool  # <2 x half>/<2 x bfloat> atomicrmw fadd selects natively
    float_atomics_validated: bool  # admits two-stage split-K (f32 workspace atomics)
    has_kernels: bool  # the generators emit kernels for it today
    max_block_size: int = 1024
    e_mach: int = 0  # EF_AMDGPU_MACH of the code object (probe, llvm22 facts §5); sm for CUDA
    # dword 3 of a raw buffer resource (V#) for ``llvm.amdgcn.make.buffer.rsrc``: format
    # bits 12-18 nonzero, OOB_SELECT (28-29) = 3, the raw offset check; 0 = no buffer loads
    buffer_rsrc_word3: int = 0
    # the backend object of model/backends.py: lowering, codegen, code objects, runtime
    backend: str = "amdgpu"
    # bytes of one K-contiguous LDS row that the lanes of one 128-byte shared-memory phase
    # read side by side (model/spec.sync_row_pad pads rows by it): AMD's 128-bit fragment
    # reads take 16 B of 8 rows; m16n8k16's 64-bit reads take 4 lanes x 8 B of 4 rows
    lds_row_span: int = 16
    # the transposing 16-bit LDS read the target has (kernel/mma.TRANSPOSED_READS): gfx1250's
    # ds_load_tr16_b128, sm_90's ldmatrix .x4 .trans; "" none
    lds_read_tr: str = ""
    # Past this many bytes the allocation is dynamic (sm_90: static shared memory stops at
    # 48 KB; above it the kernel declares extern shared memory and the launcher opts in to
    # the size, ``lds_dynamic``); 0: the target has no such split (AMD's LDS is one kind).
    lds_static_bytes: int = 0
    asm_suffix: str = ".s"  # the listing ``compile`` writes: LLVM's assembly, or NVPTX's PTX
    # the sync loop keeps K-outer LDS tiles and reads them with ``lds_read_tr`` instead of
    # transposing in registers on the way in, where both load vectors have at least this
    # many elements; 0: never (model/spec.sync_k_outer, wgrad/kloop say why)
    sync_k_outer_min_vec: int = 0
    # the async copy zero-fills an out-of-range chunk itself (NVIDIA cp.async's src-size 0):
    # no zero store beside it and no scratch stage (copies.copy_or_zero_fill)
    async_zero_fill: bool = False
    sources: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    def atom(self, dtype_ab: str) -> MmaAtom | None:
        return self.atoms.get(dtype_ab)

    @property
    def cu_count(self) -> int:
        """Compute units, from ``model.devices`` (outside the generator digest)."""
        from wgradcache.model.devices import device_size

        return device_size(self.name).cu_count

    @property
    def xcd_count(self) -> int:
        from wgradcache.model.devices import device_size

        return device_size(self.name).xcd_count

    def lds_dynamic(self, nbytes: int) -> bool:
        """Whether an allocation of ``nbytes`` is dynamic shared memory: the one rule the
        lowering (extern shared), the spec (``dynamic_lds_bytes``), the launcher (its
        opt-in attribute and launch size) and verify's structure check follow."""
        return 0 < self.lds_static_bytes < nbytes


def _atoms(m: int, n: int, k: int, form: str) -> dict[str, MmaAtom]:
    """fp16 and bf16 use the same atom shape and form."""
    return dict.fromkeys(("fp16", "bf16"), MmaAtom(m, n, k, form))


_PROBE = "probe: llvm22-amdgpu-facts.md"
_COMMON_SOURCES = {
    "atoms": f"{_PROBE} §1 (intrinsic selection per target)",
    "lds_bytes": f"{_PROBE} §4 (largest LDS that compiles; +4 B exits); tests/compile",
    "async_lds_copy": f"{_PROBE} §3 (global.load.async.to.lds selects on gfx1250 only)",
    "packed_atomics_native": f"{_PROBE} §2 (atomicrmw fadd <2 x half>, monotonic, agent)",
    "e_mach": f"{_PROBE} §5 (e_flags & 0xff)",
    "buffer_rsrc_word3": "CK ck_tile/core/config.hpp CK_TILE_BUFFER_RESOURCE_3RD_DWORD "
                         "(gfx11/gfx12 0x31004000, gfx9 0x00020000); field layout: Triton "
                         "third_party/amd BufferOpsEmitter.cpp createResourceDescriptor; "
                         "probe: llc-22 selects buffer_load_b16..b128, no branch",
}

# What the MFMA targets share. async_lds_copy is False on purpose: gfx942/gfx950's
# global->LDS copies (global_load_lds_dword[x4], buffer_load ... lds) write at M0 plus
# lane id x size, a wave-uniform, lane-contiguous destination, not the per-lane LDS address
# of gfx1250's global_load_async_to_lds that the async K loop and its emulator model are
# written for (llvm22-amdgpu-facts.md §3, §5; rocke-aot-wgrad-facts.md §7). Its K-outer
# tile rows of tile_mn + 8 elements are not lane-contiguous per wave, and there is no
# zero-fill route for a failing chunk inside one wave-wide copy. An async MFMA loop needs
# its own IR op and tile layout; until then the walk gives these targets the sync loop only.
_MFMA_SOURCES = {
    "wave_size": f"{_PROBE} §5 (.wavefront_size 64 on gfx942 / gfx950)",
    "async_lds_copy": "no: global_load_lds writes M0 + lane*size (wave-uniform base), "
                      "not the per-lane LDS address the async loop needs (see above)",
    "float_atomics_validated": f"{_PROBE} §2: native global_atomic_add_f32 / pk_add_f16 / "
                               "pk_add_bf16 at agent scope monotonic, no fences; upstream "
                               "two-stage split-K was built for gfx950 (facts §5)",
    "code_object_version": "CODE_OBJECT_VERSION (5), checked on gfx942 (facts §5)",
}

TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target(
            name="gfx1250", family="wmma", wave_size=32,
            atoms=_atoms(16, 16, 32, "gfx1250"),
            lds_bytes=327680, async_lds_copy=True, packed_atomics_native=True,
            float_atomics_validated=True,
            has_kernels=True, e_mach=0x49,
            # LLVM 22 repacks the resource for gfx1250's 45-bit num_records (probe: the
            # count lands at bit 57 up, word 3 becomes 0); no public source gives gfx1250's
            # word 3: CK's gfx12 value, unverified on hardware
            buffer_rsrc_word3=0x31004000, lds_read_tr="ds_load_tr16_b128",
            sync_k_outer_min_vec=4,
            sources={**_COMMON_SOURCES,
                     "lds_read_tr": f"{_PROBE} §3 (ds.load.tr16.b128 selects on gfx1250 "
                                    "only); lane map: kernel/mma.TRANSPOSED_READS",
                     "sync_k_outer_min_vec": "isa_quality 12-04: 128x128x64 v8x8 11.2x the "
                                             "WMMA bound (13.8-15.8x K-contiguous); 12-05: "
                                             "v4x4 16-45 instructions per MMA (23-58 "
                                             "K-contiguous); v1x1 129.8x (47.9x), v8x1 no "
                                             "better: not below 4",
                     "float_atomics_validated": "upstream PR #14832 (two-stage on gfx1250)"},
        ),
        Target(
            name="gfx1201", family="wmma", wave_size=32,
            atoms=_atoms(16, 16, 16, "gfx12"),
            lds_bytes=65536, async_lds_copy=False, packed_atomics_native=True,
            float_atomics_validated=False,
            has_kernels=True, e_mach=0x4E, buffer_rsrc_word3=0x31004000,
            sources={**_COMMON_SOURCES,
                     "float_atomics_validated": "not validated upstream (PR #14832 gates gfx1250)"},
        ),
        Target(
            name="gfx1151", family="wmma", wave_size=32,
            atoms=_atoms(16, 16, 16, "gfx11"),
            lds_bytes=65536, async_lds_copy=False,
            # <2 x half>/<2 x bfloat> atomics become a CAS loop whatever metadata (§2).
            packed_atomics_native=False,
            float_atomics_validated=False,
            has_kernels=True, e_mach=0x4A, buffer_rsrc_word3=0x31004000,
            sources=dict(_COMMON_SOURCES),
        ),
        Target(
            name="gfx950", family="mfma", wave_size=64,
            # the widest-K atom of each dtype (upstream's cache rule, facts §3/§7): two
            # 16x16x16 steps are one 16x16x32 here
            atoms=_atoms(16, 16, 32, "mfma_k32"),
            lds_bytes=163840, async_lds_copy=False, packed_atomics_native=True,
            float_atomics_validated=True,
            has_kernels=True, e_mach=0x4F, buffer_rsrc_word3=0x00020000,
            sources={**_COMMON_SOURCES, **_MFMA_SOURCES,
                     "atoms": f"{_PROBE} §1: mfma.f32.16x16x32.{{f16,bf16}} select on gfx950 "
                              "only; lane maps kernel/mma.py 'mfma_k32'"},
        ),
        Target(
            name="gfx942", family="mfma", wave_size=64,
            atoms=_atoms(16, 16, 16, "mfma"),
            lds_bytes=65536, async_lds_copy=False, packed_atomics_native=True,
            float_atomics_validated=True,
            has_kernels=True, e_mach=0x4C, buffer_rsrc_word3=0x00020000,
            sources={**_COMMON_SOURCES, **_MFMA_SOURCES,
                     "atoms": f"{_PROBE} §1: mfma.f32.16x16x16f16 / 16x16x16bf16.1k; the "
                              "16x16x32 forms do not select; lane maps kernel/mma.py 'mfma'"},
        ),
        # NVIDIA Hopper (H100 / H200), the silicon this project can run on. Facts:
        #  * atoms: PTX ISA 9.7.14.5.8 "Matrix Fragments for mma.m16n8k16 with floating
        #    point type" (f16 and bf16, f32 accumulators); two m16n8k16 side by side make
        #    the 16x16x16 atom (kernel/mma.py, lane maps); llc-22 -mcpu=sm_90 selects
        #    mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16} (probe, tests/compile).
        #  * lds_static_bytes: 48 KB of *static* shared memory per block (CUDA C++
        #    Programming Guide, "Shared Memory"); ptxas refuses a static allocation past
        #    0xc000 bytes (probe, tests/compile). lds_bytes: 227 KB (232448) per block as
        #    dynamic shared memory with the opt-in (the Guide's table for 9.0; the H100 and
        #    H200 have 228 KB per SM, 1 KB of it reserved per block).
        #  * async copy: cp.async (PTX ISA 9.7.9.25, sm_80+) with src-size: a chunk out of
        #    range copies 0 bytes and lands zeros (kernel/emulate._async_copy_zfill cites
        #    both sources); completion per thread (cp.async.wait_all).
        #  * packed atomics: red.global.add.noftz.{f16x2,bf16x2} (PTX ISA 9.7.13.6 "red",
        #    bf16x2 from sm_90) through inline PTX: atomicrmw fadd <2 x half> is a CAS loop
        #    on NVPTX (probe).
        #  * float atomics: red/atom.global.add.f32 (PTX ISA 9.7.13.6), native since sm_20.
        Target(
            name="sm_90", family="mma", wave_size=32,
            atoms=_atoms(16, 16, 16, "m16n8k16"),
            lds_bytes=232448, lds_static_bytes=49152, asm_suffix=".ptx", async_lds_copy=True,
            packed_atomics_native=True,
            float_atomics_validated=True,
            has_kernels=True, e_mach=90, backend="nvptx", lds_row_span=32,
            lds_read_tr="ldmatrix_x4_trans", sync_k_outer_min_vec=1, async_zero_fill=True,
            sources={"atoms": "PTX ISA 9.7.14.5.8 (mma.m16n8k16 fragments); llc-22 probe",
                     "lds_bytes": "CUDA Programming Guide, compute capability 9.0: 227 KB "
                                  "shared per block with the opt-in "
                                  "(cudaFuncAttributeMaxDynamicSharedMemorySize)",
                     "lds_static_bytes": "CUDA Programming Guide: 48 KB static shared per "
                                         "block; ptxas limit 0xc000 (tests/compile)",
                     "async_lds_copy": "PTX ISA 9.7.9.25 cp.async (sm_80+); llc-22 selects "
                                       "cp.async.{ca,cg}.shared.global with src-size (probe)",
                     "async_zero_fill": "PTX ISA cp.async src-size (rest zero-filled); "
                                        "CUTLASS SM80_CP_ASYNC_CACHEGLOBAL_ZFILL",
                     "packed_atomics_native": "PTX ISA red.global.add.noftz.f16x2/bf16x2",
                     "float_atomics_validated": "PTX ISA red.global.add.f32",
                     "e_mach": "cubin e_flags bits 8-15 = 90 (ptxas 13 probe)",
                     "lds_row_span": "PTX ISA 9.7.14.5.8: lanes 4g..4g+3 hold row g's k; "
                                     "H200 ncu: L1 82 % busy at 8-element pad, +6 % at 16",
                     "lds_read_tr": "PTX ISA 9.7.14.5.15 ldmatrix (sm_75+); llc-22 selects "
                                    "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 (probe)",
                     "sync_k_outer_min_vec": "H200 ncu: the register transpose's shared "
                                             "stores took 24 wavefronts each (9.5 M "
                                             "conflicts) on l3.conv2"},
        ),
    )
}


def target_names() -> list[str]:
    return list(TARGETS)


def kernel_target_names() -> list[str]:
    """Targets the generators emit kernels for (the default of every command)."""
    return [n for n, t in TARGETS.items() if t.has_kernels]


def check_target(name: str, kernels: bool = False) -> tuple[bool, str]:
    """The one check of a target name a user gave; ``kernels``: it must also have kernels."""
    if name not in TARGETS:
        return False, f"unknown target {name!r}; valid: {', '.join(TARGETS)}"
    if kernels and not TARGETS[name].has_kernels:
        return False, f"{name}: no kernel generator for {TARGETS[name].family} targets yet"
    return True, ""


def get_target(name: str) -> Target:
    try:
        return TARGETS[name]
    except KeyError:
        raise KeyError(f"unknown target {name!r}; valid: {', '.join(TARGETS)}") from None
