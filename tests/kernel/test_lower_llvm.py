"""Lowering: IR snippets, LLVM verification in-process, and codegen in a subprocess."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import llvmlite.binding as llvm
import pytest
import yaml
from kernel_samples import FORM_TARGET, MFMA_FORMS, WMMA_FORMS, every_op, gemm_tile

from wgradcache.kernel.builder import KernelBuilder
from wgradcache.kernel.ir import bf16, f16, f32, i32, ptr
from wgradcache.kernel.lower_llvm import DATA_LAYOUT, LoweringError, lower
from wgradcache.model.targets import CODE_OBJECT_VERSION, code_object_version_flag

llvm.initialize_all_targets()
llvm.initialize_all_asmprinters()

# Codegen runs in a child process: an unsupported intrinsic aborts LLVM (llvm22 facts).
_COMPILE = r"""
import json, sys
import llvmlite.binding as llvm
llvm.initialize_all_targets(); llvm.initialize_all_asmprinters()
out = []
for cpu, text in json.load(sys.stdin):
    mod = llvm.parse_assembly(text)
    mod.verify()
    tm = llvm.Target.from_triple("amdgcn-amd-amdhsa").create_target_machine(cpu=cpu, opt=2)
    out.append(tm.emit_assembly(mod))
json.dump(out, sys.stdout)
"""


def compile_many(jobs: list[tuple[str, str]]) -> list[str]:
    r = subprocess.run([sys.executable, "-c", _COMPILE], input=json.dumps(jobs),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


def metadata(asm: str) -> dict:
    block = asm.split(".amdgpu_metadata", 1)[1].split(".end_amdgpu_metadata", 1)[0]
    body = block.split("---\n", 1)[1].rsplit("\n...", 1)[0]
    return yaml.safe_load(body)["amdhsa.kernels"][0]


def verify(text: str):
    llvm.parse_assembly(text).verify()


# -- IR text ----------------------------------------------------------------------------------
def small_kernel():
    kb = KernelBuilder("snip", 128)
    a = kb.arg("a", ptr(f32), readonly=True)
    c = kb.arg("c", ptr(f32), noalias=False, align=4)
    n = kb.arg("n", i32)
    lds = kb.lds("buf", 520, elem=f32)
    kb.lds("other", 100)
    t = kb.thread_id()
    ok = kb.icmp("ult", t, n)
    v = kb.load(kb.gep(a, t), pred=ok)
    kb.store(kb.gep(lds, t), v)
    kb.barrier()
    kb.atomic_add(c, kb.load(kb.gep(lds, kb.xor(t, 1))), pred=ok)
    return kb.finish()


def test_kernel_signature_attributes_and_module_flag():
    text = lower(small_kernel(), "gfx1250")
    assert ('define amdgpu_kernel void @"snip"(ptr addrspace(1) noalias nonnull noundef '
            'readonly align 16 %"a", ptr addrspace(1) nonnull noundef align 4 %"c", '
            'i32 noundef %"n") '
            '"amdgpu-flat-work-group-size"="128,128" "uniform-work-group-size"="true"') in text
    assert '!{ i32 1, !"amdhsa_code_object_version", i32 500 }' in text
    assert code_object_version_flag(CODE_OBJECT_VERSION) == 500  # the flag has one source
    assert "!llvm.module.flags = !{ !" in text
    assert f'target datalayout = "{DATA_LAYOUT}"' in text
    verify(text)


def test_data_layout_matches_the_target_machine():
    for cpu in ("gfx1250", "gfx1201", "gfx1151"):
        tm = llvm.Target.from_triple("amdgcn-amd-amdhsa").create_target_machine(cpu=cpu)
        assert str(tm.target_data) == DATA_LAYOUT


def test_lds_globals_sized_exactly():
    text = lower(small_kernel(), "gfx1201")
    assert '@"lds.buf" = internal addrspace(3) global [520 x i8] undef, align 16' in text
    assert '@"lds.other" = internal addrspace(3) global [100 x i8] undef, align 16' in text


def test_atomic_is_agent_monotonic_with_no_fine_grained_metadata():
    text = lower(small_kernel(), "gfx1151")
    m = re.search(r'atomicrmw fadd ptr addrspace\(1\) %"c", float %"v\d+\.ld" '
                  r'syncscope\("agent"\) monotonic, align 4, !amdgpu.no.fine.grained.memory '
                  r"(!\d+)", text)
    assert m, text
    assert f"{m.group(1)} = !{{  }}" in text
    assert "global.atomic.fadd" not in text and "seq_cst" not in text


def test_predicated_load_is_a_branch_and_a_phi_with_zero():
    text = lower(small_kernel(), "gfx1250")
    assert re.search(r'icmp ult i32 %"v\d+", %"n"', text)
    assert re.search(r'br i1 %"v\d+", label %"v(\d+)\.do", label %"v\1\.done"', text)
    assert re.search(r'phi\s+float \[%"v\d+\.ld", %"v\d+\.do"\], \[0\.0, %"entry"\]', text)


def test_barrier_is_fenced():
    text = lower(small_kernel(), "gfx1250")
    assert ('fence syncscope("workgroup") release\n  call void @"llvm.amdgcn.s.barrier"()\n'
            '  fence syncscope("workgroup") acquire') in text


@pytest.mark.parametrize(("form", "dt", "decl"), [
    ("gfx1250", f16, '<8 x float> @"llvm.amdgcn.wmma.f32.16x16x32.f16.v8f32.v16f16"(i1 %".1", '
                     '<16 x half> %".2", i1 %".3", <16 x half> %".4", i16 %".5", '
                     '<8 x float> %".6", i1 %".7", i1 %".8")'),
    ("gfx1250", bf16, '<8 x float> @"llvm.amdgcn.wmma.f32.16x16x32.bf16.v8f32.v16bf16"(i1 '
                      '%".1", <16 x bfloat> %".2", i1 %".3", <16 x bfloat> %".4"'),
    ("gfx12", f16, '<8 x float> @"llvm.amdgcn.wmma.f32.16x16x16.f16.v8f32.v8f16"(<8 x half> '
                   '%".1", <8 x half> %".2", <8 x float> %".3")'),
    ("gfx12", bf16, '<8 x float> @"llvm.amdgcn.wmma.f32.16x16x16.bf16.v8f32.v8i16"(<8 x i16> '
                    '%".1", <8 x i16> %".2", <8 x float> %".3")'),
    ("gfx11", f16, '<8 x float> @"llvm.amdgcn.wmma.f32.16x16x16.f16.v8f32.v16f16"(<16 x half> '
                   '%".1", <16 x half> %".2", <8 x float> %".3")'),
    ("gfx11", bf16, '<8 x float> @"llvm.amdgcn.wmma.f32.16x16x16.bf16.v8f32.v16i16"(<16 x i16> '
                    '%".1", <16 x i16> %".2", <8 x float> %".3")'),
])
def test_wmma_declarations_per_target(form, dt, decl):
    text = lower(gemm_tile(form, dt), FORM_TARGET[form])
    assert f"declare {decl}" in text
    if dt == bf16 and form != "gfx1250":
        assert re.search(r"bitcast <\d+ x bfloat> %\"v\d+\" to <\d+ x i16>", text)
    if form == "gfx1250":
        assert re.search(r"call <8 x float> @\S+\(i1 0, <16 x \w+> %\"v\d+\", i1 0, <16 x \w+> "
                         r"%\"v\d+\", i16 0, <8 x float> %\"v\d+\", i1 0, i1 0\)", text)
    verify(text)


@pytest.mark.parametrize("form,dt,decl", [
    ("mfma", f16, '<4 x float> @"llvm.amdgcn.mfma.f32.16x16x16f16"(<4 x half> %".1", '
                  '<4 x half> %".2", <4 x float> %".3", i32 %".4", i32 %".5", i32 %".6")'),
    ("mfma", bf16, '<4 x float> @"llvm.amdgcn.mfma.f32.16x16x16bf16.1k"(<4 x i16> %".1", '
                   '<4 x i16> %".2", <4 x float> %".3", i32 %".4", i32 %".5", i32 %".6")'),
    ("mfma_k32", f16, '<4 x float> @"llvm.amdgcn.mfma.f32.16x16x32.f16"(<8 x half> %".1", '
                      '<8 x half> %".2", <4 x float> %".3", i32 %".4", i32 %".5", i32 %".6")'),
    ("mfma_k32", bf16, '<4 x float> @"llvm.amdgcn.mfma.f32.16x16x32.bf16"(<8 x bfloat> '
                       '%".1", <8 x bfloat> %".2", <4 x float> %".3", i32 %".4", i32 %".5", '
                       'i32 %".6")'),
])
def test_mfma_declarations_per_target(form, dt, decl):
    text = lower(gemm_tile(form, dt), FORM_TARGET[form])
    assert f"declare {decl}" in text
    assert bool(re.search(r"bitcast <4 x bfloat> %\"v\d+\" to <4 x i16>", text)) == (
        dt == bf16 and form == "mfma")
    assert re.search(r"call <4 x float> @\S+\(<\d x \w+> %\"v[\d.a-z]+\", <\d x \w+> "
                     r"%\"v[\d.a-z]+\", <4 x float> %\"v\d+\", i32 0, i32 0, i32 0\)", text)
    assert '"amdgpu-flat-work-group-size"="128,128"' in text
    verify(text)


def test_loop_lowers_to_a_guarded_bottom_tested_body():
    """Rotated form: guard, body phis fed by the entry and the body itself, the test at the
    latch, and the results as exit phis (the initial values when no iteration ran)."""
    text = lower(gemm_tile("gfx12", f16), "gfx1201")
    assert re.search(r'%"for(\d+)\.guard" = icmp slt i32 0, %"k"\n'
                     r'  br i1 %"for\1\.guard", label %"for\1\.body", label %"for\1\.exit"',
                     text)
    assert re.search(r'for\d+\.body:\n  %"v\d+" = phi\s+i32 \[0, %"entry"\], '
                     r'\[%"for\d+\.next", %"for\d+\.body"\]', text)
    assert re.search(r'%"for(\d+)\.cond" = icmp slt i32 %"for\1\.next", %"k"\n'
                     r'  br i1 %"for\1\.cond", label %"for\1\.body", label %"for\1\.exit"',
                     text)
    assert re.search(r'for\d+\.exit:\n  %"v\d+\.out" = phi\s+<8 x float> \[<float[^]]*, '
                     r'%"entry"\], \[%"v\d+", %"for\d+\.body"\]', text)


def test_lowering_is_deterministic():
    a = lower(gemm_tile("gfx1250", bf16, use_async=True), "gfx1250")
    b = lower(gemm_tile("gfx1250", bf16, use_async=True), "gfx1250")
    assert a == b
    assert lower(every_op("gfx12", async_copy=False), "gfx1201") == \
        lower(every_op("gfx12", async_copy=False), "gfx1201")


def test_unsupported_ops_fail_early_naming_op_dtype_and_target():
    with pytest.raises(LoweringError, match=r"MMA %\d+ \(<8 x f32>\) on gfx1201: MMA form "
                                            r"'gfx1250' does not exist here"):
        lower(gemm_tile("gfx1250", f16), "gfx1201")
    with pytest.raises(LoweringError, match=r"ASYNC_COPY %\d+ \(void\) on gfx1151: no async"):
        lower(gemm_tile("gfx1250", f16, use_async=True), "gfx1151")
    with pytest.raises(LoweringError, match="on gfx1250: MMA form 'mfma'"):
        lower(gemm_tile("mfma", f16), "gfx1250")
    with pytest.raises(LoweringError, match="on gfx942: MMA form 'mfma_k32' does not exist"):
        lower(gemm_tile("mfma_k32", f16), "gfx942")


def test_every_op_verifies_on_each_target():
    for form in WMMA_FORMS + MFMA_FORMS:
        verify(lower(every_op(form, async_copy=form == "gfx1250"), FORM_TARGET[form]))


# -- codegen (subprocess) -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def compiled():
    """Every sample kernel compiled once: {(name, target): (KernelDef, asm)}."""
    kernels = {}
    for form in WMMA_FORMS + MFMA_FORMS:
        t = FORM_TARGET[form]
        kernels[("every_op", t)] = every_op(form, async_copy=form == "gfx1250")
        for dt in (f16, bf16):
            kernels[(f"gemm_{dt.scalar}", t)] = gemm_tile(form, dt)
        if form == "gfx1250":
            kernels[("gemm_async", t)] = gemm_tile(form, bf16, use_async=True)
    keys = sorted(kernels)
    asms = compile_many([(t, lower(kernels[(n, t)], t)) for n, t in keys])
    return {k: (kernels[k], a) for k, a in zip(keys, asms, strict=True)}


def test_every_op_compiles_on_each_target(compiled):
    for target in ("gfx1250", "gfx1201", "gfx1151", "gfx942", "gfx950"):
        kd, asm = compiled[("every_op", target)]
        md = metadata(asm)
        assert md[".name"] == kd.name
        assert md[".max_flat_workgroup_size"] == kd.block_size
        mm = "v_mfma" if target in ("gfx942", "gfx950") else "v_wmma"
        assert asm.count(mm) == 2, target
        assert ".amdhsa_code_object_version 5" in asm


def test_lds_of_the_code_object_is_the_allocation_sum(compiled):
    for (name, target), (kd, asm) in compiled.items():
        assert kd.lds_bytes > 0
        assert metadata(asm)[".group_segment_fixed_size"] == kd.lds_bytes, (name, target)


def test_wmma_gemm_tiles_compile_to_wmma(compiled):
    for form in WMMA_FORMS:
        for dt in ("f16", "bf16"):
            _, asm = compiled[(f"gemm_{dt}", FORM_TARGET[form])]
            assert re.search(rf"v_wmma_f32_16x16x{32 if form == 'gfx1250' else 16}_{dt} ", asm)


def test_mfma_gemm_tiles_compile_to_mfma_with_agprs(compiled):
    """gfx942: v_mfma_f32_16x16x16_{f16,bf16}; gfx950: the 16x16x32 form. Wave64, and LLVM
    keeps the accumulators where it likes (AGPRs here): the metadata counts them."""
    for form, shape in (("mfma", "16x16x16"), ("mfma_k32", "16x16x32")):
        for dt in ("f16", "bf16"):
            _, asm = compiled[(f"gemm_{dt}", FORM_TARGET[form])]
            assert re.search(rf"v_mfma_f32_{shape}_{dt} ", asm), (form, dt)
            md = metadata(asm)
            assert md[".wavefront_size"] == 64
            assert ".agpr_count" in md


def test_gfx1250_atomics_async_and_barrier_instructions(compiled):
    _, asm = compiled[("every_op", "gfx1250")]
    for ins in ("global_atomic_add_f32", "global_atomic_pk_add_f16", "global_atomic_pk_add_bf16",
                "global_load_async_to_lds_b32", "s_wait_asynccnt 0x0", "s_barrier_signal -1",
                "s_barrier_wait -1"):
        assert ins in asm, ins
    assert "global_wb" not in asm and "global_inv" not in asm  # monotonic: no cache maintenance
    _, asm = compiled[("gemm_async", "gfx1250")]
    assert "global_load_async_to_lds_b32" in asm and "s_wait_asynccnt" in asm


def test_gfx1151_f32_atomic_is_native(compiled):
    _, asm = compiled[("every_op", "gfx1151")]
    assert "global_atomic_add_f32" in asm
