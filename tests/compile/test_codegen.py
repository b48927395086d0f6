"""compile_ir: one MMA kernel per target read back, listings, llc equality, failures."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from wgradcache.compile import codegen
from wgradcache.compile.codegen import CodegenError, CodegenOptions, compile_ir
from wgradcache.compile.discovery import CODEGEN_ENV, find_linker
from wgradcache.compile.isa import isa_stats
from wgradcache.compile.libllvm import system_llvm
from wgradcache.compile.samples import GemmSample, atomic_kernel, gemm_kernel, mma_kernel
from wgradcache.compile.toolchain import toolchain_identity, with_code_object_version
from wgradcache.model.targets import CODE_OBJECT_VERSION, get_target, target_names
from wgradcache.wgrad.emit import emit_ir

# llvm22-amdgpu-facts.md §5: e_flags of each target's code object (mach + xnack/sramecc).
E_FLAGS = {"gfx1250": 0x549, "gfx1201": 0x4E, "gfx1151": 0x4A, "gfx950": 0x54F, "gfx942": 0x54C}


AMD = [t for t in target_names() if get_target(t).backend == "amdgpu"]  # sm_90: test_sm90.py


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("target", AMD)
def test_mma_kernel_reads_back(compiled, target, dtype):
    t = get_target(target)
    obj = compiled(mma_kernel(target, dtype, count=3), target)
    info = obj.info
    assert info.mach == t.e_mach
    assert info.e_flags == E_FLAGS[target]
    assert info.target == f"amdgcn-amd-amdhsa--{target}"
    assert info.code_object_version == 5
    assert (info.symbol, info.has_symbol, info.has_descriptor) == ("mma", True, True)
    assert [(a.name, a.offset, a.size, a.value_kind) for a in info.explicit_args] == [
        ("a", 0, 8, "global_buffer"), ("b", 8, 8, "global_buffer"),
        ("d", 16, 8, "global_buffer")]
    assert info.args[3].hidden and info.kernarg_segment_size > 24
    assert info.wavefront_size == t.wave_size
    assert info.max_flat_workgroup_size == t.wave_size  # the kernel's attribute
    assert info.vgpr_count > 0 and info.sgpr_count > 0
    assert info.vgpr_spill_count == info.sgpr_spill_count == 0
    assert info.group_segment_fixed_size == info.private_segment_fixed_size == 0
    stats = isa_stats(obj.asm)
    family = "wmma" if t.family == "wmma" else "mfma"
    assert stats["mma"] == stats[family] == 3
    assert obj.listing == "disassembly"


BACKENDS = pytest.mark.parametrize("backend", ["libllvm", "llvmlite"])


@BACKENDS
def test_hsaco_matches_llc_and_lld(monkeypatch, tmp_path, backend):
    """Our in-process object + piped link equals llc-22 -O3 + ld.lld-22, byte for byte,
    through either codegen library (Debian's libLLVM-22 or llvmlite's assertions build)."""
    monkeypatch.setenv(CODEGEN_ENV, backend)
    ir = gemm_kernel("gfx1250", GemmSample(tile_k=64, async_copy=True))
    ll, o, so = tmp_path / "k.ll", tmp_path / "k.o", tmp_path / "k.hsaco"
    ll.write_text(with_code_object_version(ir))
    subprocess.run([shutil.which("llc-22"), "-O3", "-mtriple=amdgcn-amd-amdhsa",
                    "-mcpu=gfx1250", "-filetype=obj", str(ll), "-o", str(o)], check=True)
    subprocess.run([str(find_linker()), "-shared", str(o), "-o", str(so)], check=True)
    assert compile_ir(ir, "gfx1250").hsaco == so.read_bytes()


LISTING_CASES = [
    (gemm_kernel("gfx1250", GemmSample(tile_k=64, async_copy=True, atomic=True)), "gfx1250"),
    (gemm_kernel("gfx1201", GemmSample(tile_k=32)), "gfx1201"),
    (gemm_kernel("gfx1151", GemmSample(dtype="bf16", tile_m=64, tile_n=64, tile_k=32,
                                       atomic=True)), "gfx1151"),
    (gemm_kernel("gfx942", GemmSample(tile_k=32)), "gfx942"),
    (atomic_kernel("<2 x bfloat>", "seq_cst"), "gfx1151"),
]


@pytest.mark.parametrize("ir,target", LISTING_CASES)
def test_listings_give_identical_statistics(compiled, monkeypatch, ir, target):
    """In-process disassembly, llvm-objdump and LLVM's .s: same code, same counts."""
    ours = compiled(ir, target)
    assembly = compiled(ir, target, "assembly")
    monkeypatch.setattr(codegen, "disassembler_available", lambda: False)
    objdump = compile_ir(ir, target)
    assert (ours.listing, objdump.listing, assembly.listing) == (
        "disassembly", "disassembly", "assembly")
    assert ".amdgpu_metadata" in assembly.asm
    assert "file format elf64-amdgpu" in objdump.asm and "file format" not in ours.asm
    assert isa_stats(ours.asm) == isa_stats(objdump.asm) == isa_stats(assembly.asm)
    assert ours.hsaco == objdump.hsaco == assembly.hsaco
    assert isa_stats(ours.asm)["instructions"] > 20


def test_no_listing(compiled):
    ir = mma_kernel("gfx1201")
    none = compile_ir(ir, "gfx1201", listing="none")
    assert (none.asm, none.listing) == ("", "none")
    assert none.hsaco == compiled(ir, "gfx1201").hsaco


@BACKENDS
def test_repeated_calls_reuse_the_process_state(monkeypatch, backend):
    monkeypatch.setenv(CODEGEN_ENV, backend)
    ir = mma_kernel("gfx950")
    first = compile_ir(ir, "gfx950")
    machines = (len(system_llvm()._machines) if backend == "libllvm"
                else codegen._target_machine.cache_info().currsize)
    second = compile_ir(ir, "gfx950")
    assert machines == (len(system_llvm()._machines) if backend == "libllvm"
                        else codegen._target_machine.cache_info().currsize)
    assert first.hsaco == second.hsaco and first.asm == second.asm
    assert set(second.timings) == {"parse", "codegen", "listing", "link", "read", "total"}
    assert all(v >= 0 for v in second.timings.values())
    assert second.timings["total"] >= second.timings["codegen"]


def test_features_change_e_flags():
    info = compile_ir(mma_kernel("gfx942"), "gfx942", CodegenOptions(features="-xnack")).info
    assert (info.e_flags, info.target) == (0x64C, "amdgcn-amd-amdhsa--gfx942:xnack-")


@BACKENDS
def test_ir_that_does_not_parse(monkeypatch, backend):
    monkeypatch.setenv(CODEGEN_ENV, backend)
    with pytest.raises(CodegenError, match="does not parse"):
        compile_ir("define amdgpu_kernel void @k( {", "gfx1250")


@BACKENDS
def test_ir_that_does_not_verify(monkeypatch, backend):
    monkeypatch.setenv(CODEGEN_ENV, backend)
    # A gfx1250 WMMA flag must be an immediate (facts §1).
    ir = mma_kernel("gfx1250").replace(
        "call <8 x float> @llvm.amdgcn.wmma.f32.16x16x32.f16.v8f32.v16f16(i1 0",
        "call <8 x float> @llvm.amdgcn.wmma.f32.16x16x32.f16.v8f32.v16f16(i1 %flag", 1)
    ir = ir.replace("  %va = load", "  %flag = icmp eq i32 %tid, 0\n  %va = load", 1)
    with pytest.raises(CodegenError, match="does not verify.*immarg"):
        compile_ir(ir, "gfx1250")


def test_llc_backend_same_bytes_and_its_errors(monkeypatch):
    """WGRADCACHE_CODEGEN=llc (the subprocess pipeline the build benchmark compares with):
    the same code object as in-process codegen; llc's own message on bad IR."""
    ir = gemm_kernel("gfx1201", GemmSample(tile_k=32))
    ours = compile_ir(ir, "gfx1201")
    monkeypatch.setenv(CODEGEN_ENV, "llc")
    via_llc = compile_ir(ir, "gfx1201")
    assert via_llc.hsaco == ours.hsaco and isa_stats(via_llc.asm) == isa_stats(ours.asm)
    assert via_llc.timings["parse"] < 1e-3 < via_llc.timings["codegen"]  # llc parses
    with pytest.raises(CodegenError, match=r"llc failed: .*error: expected type"):
        compile_ir("define amdgpu_kernel void @k( {", "gfx1201")


def test_bad_arguments():
    with pytest.raises(KeyError, match="gfx9000"):
        compile_ir(mma_kernel("gfx1250"), "gfx9000")
    with pytest.raises(ValueError, match="listing"):
        compile_ir(mma_kernel("gfx1250"), "gfx1250", listing="objdump")


@pytest.mark.parametrize("version", [4, 6, 500, "5"])
def test_a_code_object_version_the_lowering_does_not_emit_is_refused_in_one_line(version):
    """Lowered kernels pin v5 in their IR; any other version could only fail on every job
    (before: 4 and 6 were accepted, and each real kernel then raised in the worker)."""
    with pytest.raises(ValueError) as err:
        CodegenOptions(code_object_version=version)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"code_object_version {version!r} cannot be built: kernels are "
                          f"lowered for v{CODE_OBJECT_VERSION}")


def test_lowering_options_and_identity_share_one_code_object_version():
    from wgradcache.jobs import walk

    spec = next(iter(walk("gfx1250")))
    ir = emit_ir(spec).ir_text
    assert CodegenOptions().code_object_version == CODE_OBJECT_VERSION
    assert toolchain_identity().code_object_version == CODE_OBJECT_VERSION
    assert with_code_object_version(ir, CodegenOptions().code_object_version) == ir
    assert compile_ir(ir, "gfx1250", listing="none").info.code_object_version == \
        CODE_OBJECT_VERSION
