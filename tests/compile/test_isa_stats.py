"""isa_stats on hand-written listings (exact counts) and on compiled kernels (facts §2, §3)."""

from __future__ import annotations

import pytest

from wgradcache.compile.isa import isa_stats, main_loop, mma_per_loop, parse_listing
from wgradcache.compile.samples import GemmSample, atomic_kernel, gemm_kernel, mma_form
from wgradcache.model.targets import get_target

ASM = """\
	.amdgcn_target "amdgcn-amd-amdhsa--gfx1250"
	.text
k:                                      ; @k
; %bb.0:
	s_load_b128 s[0:3], s[4:5], 0x0     ; v_wmma_f32_16x16x32_f16 in a comment
	global_load_b128 v[0:3], v0, s[0:1]
	ds_store_b128 v1, v[0:3]
	.p2align	6
.LBB0_1:                                ; =>This Inner Loop Header: Depth=1
	global_load_async_to_lds_b128 v1, v2, s[0:1]
	s_wait_asynccnt 0x0
	s_barrier_signal -1
	s_barrier_wait -1
	ds_load_b128 v[4:7], v1
	v_wmma_f32_16x16x32_f16 v[16:23], v[0:7], v[8:15], v[16:23]
	v_wmma_f32_16x16x32_f16 v[24:31], v[0:7], v[8:15], v[24:31]
	s_nop 3
	s_cbranch_scc1 .LBB0_1
; %bb.2:
	global_wb scope:SCOPE_DEV
	global_atomic_pk_add_f16 v0, v1, s[0:1] scope:SCOPE_DEV
	s_cbranch_execz .LBB0_4
.LBB0_3:
	global_atomic_cmpswap_b32 v2, v[0:1], v[2:3], off th:TH_ATOMIC_RETURN
	s_cbranch_execnz .LBB0_3
.LBB0_4:
	global_inv scope:SCOPE_DEV
	global_store_b32 v0, v1, s[0:1]
	s_endpgm
	.amdgpu_metadata
---
amdhsa.kernels:
  - .name: k
    v_wmma_f32_16x16x32_f16: 1
...
	.end_amdgpu_metadata
"""


def test_counts_instruction_lines_only():
    s = isa_stats(ASM)
    assert s["instructions"] == 19  # 20 code lines, less the s_nop
    assert (s["mma"], s["wmma"], s["mfma"]) == (2, 2, 0)
    assert (s["async_copies"], s["async_waits"]) == (1, 1)
    assert s["barriers"] == 1  # signal + wait is one barrier
    assert (s["global_atomics"], s["global_atomic_pk_add_f16"], s["global_atomic_cmpswap"]) == (
        2, 1, 1)
    assert (s["global_wb"], s["global_inv"], s["cache_ops"]) == (1, 1, 2)
    assert (s["ds_loads"], s["ds_stores"]) == (1, 1)
    assert (s["global_loads"], s["global_stores"]) == (1, 1)
    assert (s["loops"], s["cas_loops"]) == (2, 1)
    assert (s["main_loop_instructions"], s["main_loop_mma"], s["main_loop_barriers"],
            s["main_loop_async_copies"]) == (8, 2, 1, 1)
    assert mma_per_loop(ASM) == [2, 0]
    assert (s["main_loop_ds_loads"], s["main_loop_ds_load_bytes"], s["main_loop_ds_loads_b128"],
            s["main_loop_ds_loads_narrow"], s["main_loop_waits"], s["main_loop_salu"],
            s["main_loop_valu"], s["main_loop_exec_branches"]) == (1, 16, 1, 0, 1, 0, 0, 0)


LOOP = """\
k:
\ts_mov_b32 s2, 0
.LBB0_1:
\tv_add_nc_u32_e32 v1, 4, v1
\ts_and_saveexec_b32 s3, vcc_lo
\ts_cbranch_execz .LBB0_3
\tglobal_load_b128 v[4:7], v1, s[0:1]
.LBB0_3:
\ts_or_b32 exec_lo, exec_lo, s3
\ts_wait_loadcnt 0x0
\tds_store_b128 v2, v[4:7]
\ts_barrier_signal -1
\ts_barrier_wait -1
\tds_load_u16 v8, v3
\tds_load_u16_d16_hi v8, v3 offset:80
\tds_load_b64 v[10:11], v3 offset:160
\tds_load_2addr_b64 v[12:15], v3 offset1:4
\tds_load_b128 v[16:19], v3 offset:320
\ts_wait_dscnt 0x0
\tv_perm_b32 v9, v8, v8, 0x5040100
\ts_delay_alu instid0(VALU_DEP_1)
\tv_wmma_f32_16x16x32_f16 v[20:27], v[8:15], v[12:19], v[20:27]
\ts_add_co_i32 s2, s2, 32
\ts_cmp_ge_i32 s2, s4
\ts_cbranch_scc0 .LBB0_1
\ts_endpgm
"""


def test_main_loop_figures():
    """What feeds the MMAs of one K tile: LDS reads by width, ALU, exec branches, waits."""
    s = isa_stats(LOOP)
    assert (s["main_loop_instructions"], s["main_loop_mma"]) == (21, 1)
    # u16 + d16_hi (2 B each), b64 (8), 2addr_b64 (16: two 8-byte reads), b128 (16)
    assert (s["main_loop_ds_loads"], s["main_loop_ds_load_bytes"]) == (5, 44)
    assert (s["main_loop_ds_loads_b128"], s["main_loop_ds_loads_narrow"],
            s["main_loop_ds_loads_b16"]) == (2, 3, 2)
    assert (s["main_loop_ds_stores"], s["main_loop_ds_store_bytes"]) == (1, 16)
    assert s["main_loop_global_loads"] == 1
    assert (s["main_loop_exec_branches"], s["main_loop_saveexec"]) == (1, 1)
    # s_wait_loadcnt, s_wait_dscnt; s_delay_alu is a hint, not a wait nor SALU work
    assert s["main_loop_waits"] == 2
    assert s["main_loop_salu"] == 4  # saveexec, or (exec restore), add, cmp
    assert (s["main_loop_valu"], s["main_loop_v_perm"]) == (2, 1)
    assert s["main_loop_barriers"] == 1


# a steady-state loop, then a checked loop of as many MMAs (one header, two back-edges)
TWO_LOOPS = """\
k:
.LBB0_1:
\tglobal_load_async_to_lds_b128 v1, v2, s[0:1]
\tv_wmma_f32_16x16x32_f16 v[16:23], v[0:7], v[8:15], v[16:23]
\ts_cbranch_scc1 .LBB0_1
.LBB0_2:
\tv_cndmask_b32_e32 v3, 0, v4, vcc_lo
\tv_wmma_f32_16x16x32_f16 v[16:23], v[0:7], v[8:15], v[16:23]
\ts_cbranch_scc0 .LBB0_2
\tds_store_b128 v1, v[0:3]
\tglobal_load_async_to_lds_b128 v3, v2, s[0:1]
\ts_cbranch_scc1 .LBB0_2
\ts_endpgm
"""


def test_main_loop_is_the_first_of_equals():
    """Loops of equal MMA counts: the first in program order is the main loop (the async
    loop's steady state before its checked tail), and of one header's back-edges the
    outermost."""
    code, labels = parse_listing(TWO_LOOPS)
    lp = main_loop(code, labels)
    assert (lp.start, lp.end) == (labels[".LBB0_1"], labels[".LBB0_1"] + 2)
    s = isa_stats(TWO_LOOPS)
    assert (s["main_loop_instructions"], s["main_loop_async_copies"]) == (3, 1)
    assert s["main_loop_ds_stores"] == 0 and s["main_loop_valu"] == 0
    later = isa_stats(TWO_LOOPS.replace("k:\n.LBB0_1:", "k:\n\ts_nop 0\n.LBB0_1:")
                      .replace("v_wmma_f32_16x16x32_f16 v[16:23], v[0:7], v[8:15], v[16:23]\n"
                               "\ts_cbranch_scc1 .LBB0_1", "s_cbranch_scc1 .LBB0_1"))
    assert (later["main_loop_instructions"], later["main_loop_ds_stores"]) == (6, 1)


def test_a_forward_branch_is_no_loop():
    asm = "k:\n\tglobal_atomic_cmpswap_b32 v2, v[0:1], v[2:3], off\n" \
          "\ts_cbranch_execnz .LBB0_2\n.LBB0_2:\n\ts_endpgm\n"
    s = isa_stats(asm)
    assert (s["loops"], s["cas_loops"], s["global_atomic_cmpswap"]) == (0, 0, 1)


def test_objdump_format():
    dis = """
<stdin>:\tfile format elf64-amdgpu

Disassembly of section .text:

0000000000000000 <k>:
\ts_mov_b32 s0, 0                                            // 000000000000: BE800080
\ts_barrier                                                  // 000000000004: BF8A0000

0000000000000008 <L0>:
\tv_mfma_f32_16x16x16_f16 a[0:3], v[2:3], v[4:5], a[0:3]     // 000000000008: D3CD8000
\ts_cbranch_scc1 L0                                          // 000000000010: BF85FFFD
\ts_endpgm                                                   // 000000000014: BF810000
\ts_code_end                                                 // 000000000018: BF9F0000
"""
    s = isa_stats(dis)
    assert (s["instructions"], s["mfma"], s["barriers"], s["loops"], s["main_loop_mma"]) == (
        5, 1, 1, 1, 1)
    code, labels = parse_listing(dis)
    assert labels == {"k": 0, "L0": 2}


ATOMICS = [  # (target, value type, ordering) -> facts §2
    ("gfx1250", "<2 x half>", "monotonic", "global_atomic_pk_add_f16", 0, ()),
    ("gfx1250", "<2 x bfloat>", "monotonic", "global_atomic_pk_add_bf16", 0, ()),
    ("gfx1250", "float", "monotonic", "global_atomic_add_f32", 0, ()),
    ("gfx1201", "<2 x half>", "monotonic", "global_atomic_pk_add_f16", 0, ()),
    ("gfx942", "<2 x bfloat>", "monotonic", "global_atomic_pk_add_bf16", 0, ()),
    ("gfx1151", "<2 x half>", "monotonic", "global_atomic_cmpswap", 1, ()),
    ("gfx1151", "<2 x bfloat>", "monotonic", "global_atomic_cmpswap", 1, ()),
    ("gfx1250", "<2 x half>", "seq_cst", "global_atomic_pk_add_f16", 0,
     ("global_wb", "global_inv")),
    ("gfx942", "<2 x half>", "seq_cst", "global_atomic_pk_add_f16", 0,
     ("buffer_wbl2", "buffer_inv")),
    ("gfx1151", "<2 x half>", "seq_cst", "global_atomic_cmpswap", 1,
     ("buffer_gl0_inv", "buffer_gl1_inv")),
]


@pytest.mark.parametrize("target,vt,order,instr,cas,fences", ATOMICS)
def test_atomics(compiled, target, vt, order, instr, cas, fences):
    s = isa_stats(compiled(atomic_kernel(vt, order), target).asm)
    assert s[instr] == s["global_atomics"] == 1
    assert s["cas_loops"] == cas
    assert s["cache_ops"] == len(fences) and all(s[f] == 1 for f in fences)
    if not cas:
        assert s["loops"] == 0 and s["global_atomic_cmpswap"] == 0


@pytest.mark.parametrize("target,async_copy", [("gfx1250", True), ("gfx1250", False),
                                               ("gfx1201", False), ("gfx950", False)])
def test_gemm_main_loop(compiled, target, async_copy):
    tile_m = tile_n = 128
    tile_k, warps = 64, 2
    s = isa_stats(compiled(gemm_kernel(target, GemmSample(tile_k=tile_k, async_copy=async_copy,
                                                          atomic=True)), target).asm)
    k = mma_form(target).k
    per_step = (tile_m // warps // 16) * (tile_n // warps // 16) * (tile_k // k)
    block = get_target(target).wave_size * warps * warps
    copies = 2 * tile_m * tile_k * 2 // 16 // block  # 16-byte copies of A and B
    assert s["mma"] == s["main_loop_mma"] == per_step
    assert s["barriers"] == s["main_loop_barriers"] == 2
    assert s["main_loop_async_copies"] == s["async_copies"] == (copies if async_copy else 0)
    assert s["async_waits"] == (1 if async_copy else 0)
    assert s["ds_stores"] == (0 if async_copy else copies)
    assert s["cas_loops"] == 0 and s["cache_ops"] == 0
    acc_pairs = per_step // (tile_k // k) * (4 if get_target(target).family == "wmma" else 2)
    assert s["global_atomic_pk_add_f16"] == acc_pairs


def test_main_loop_figures_of_a_compiled_wgrad_kernel(compiled):
    """Exact main-loop figures (one K tile) of a small pipelined sync kernel, LLVM 22:
    gfx1201, 64x32x32 over two waves, 8-element loads. Fragments: 2 atoms along M and 2
    along N per wave, one 128-bit read each, two k-steps: 8 reads, 128 bytes; one barrier;
    6 buffer loads (A 256 vectors, B 128, over 64 threads); no exec-mask branch; the B
    gather's coordinates carried (no division in the loop). A's loads read through a record
    that moves with the tile (its per-tile resource is SALU: 14, was 4) and need no VALU;
    B's validity is compares and selects, a column past N a tap row outside the image
    (VALU 69, was 103 before these; instructions 158). The gather's coordinates are
    carried times the stride: no multiply per row, but the row carry is a select and an
    add where it was one add-with-carry (VALU 71)."""
    from wgradcache.model.spec import from_label
    from wgradcache.wgrad.emit import emit_ir

    spec = from_label("gfx1201-fp16-t64x32x32-w2x1-v8x8-sync-default-none")
    s = isa_stats(compiled(emit_ir(spec).ir_text, spec.target, "disassembly").asm)
    got = {k[len("main_loop_"):]: v for k, v in s.items() if k.startswith("main_loop_")}
    assert got == {
        "instructions": 137, "mma": 8, "barriers": 1, "async_copies": 0,
        "ds_loads": 8, "ds_load_bytes": 128, "ds_loads_b128": 8, "ds_loads_narrow": 0,
        "ds_loads_b16": 0, "ds_loads_tr": 0, "ds_stores": 8, "ds_store_bytes": 96,
        "global_loads": 6, "valu": 71, "salu": 14, "exec_branches": 0, "saveexec": 0,
        "waits": 16, "v_perm": 24, "async_wait_depth": 0}
    assert s["buffer_loads"] == 2 * 6  # the prologue's tile and the loop's prefetch
