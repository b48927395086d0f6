"""Real wgrad kernels through LLVM: code objects per WMMA target, determinism, and the ISA
each variant must (not) contain."""

from __future__ import annotations

import itertools

import pytest

from wgradcache.cache.entry import record_json
from wgradcache.cache.store import TargetCache
from wgradcache.compile.codegen import CodegenOptions
from wgradcache.compile.isolate import compile_isolated
from wgradcache.jobs import default_jobdata, walk
from wgradcache.kernel import mma
from wgradcache.model.spec import KernelSpec, is_direct, lds_bytes, validate
from wgradcache.model.targets import get_target
from wgradcache.pipeline.build import BuildRequest, build
from wgradcache.pipeline.verify import isa_problems
from wgradcache.wgrad.emit import emit_ir

GEOMETRIES = [(32, 32, 32, 1, 1), (64, 64, 32, 2, 2), (128, 64, 32, 4, 2), (64, 128, 32, 2, 2),
              (128, 128, 32, 2, 4)]


def _sync_specs() -> list[KernelSpec]:
    """The spread on every WMMA target, where its ladder keeps the geometry."""
    out = []
    for target, dtype, (tm, tn, tk, wm, wn) in itertools.product(
            ("gfx1250", "gfx1201", "gfx1151"), ("fp16", "bf16"), GEOMETRIES):
        spec = KernelSpec(target=target, dtype=dtype, dw_dtype=dtype, tile_m=tm, tile_n=tn,
                          tile_k=tk, warp_m=wm, warp_n=wn, vec_a=8, vec_b=8)
        # gfx1151 keeps 32 accumulators per lane at most
        if validate(spec, limits=default_jobdata().limits_for(target))[0]:
            out.append(spec)
    # gfx1250's 2-step tile_k 64, narrow loads, fp32 dW (gfx1151's f32 atomic is native)
    out.append(KernelSpec("gfx1250", "bf16", "bf16", 128, 128, 64, 4, 2, vec_a=8, vec_b=8))
    out.append(KernelSpec("gfx1201", "fp16", "fp16", 64, 64, 32, 2, 2, vec_a=1, vec_b=1))
    out.append(KernelSpec("gfx1151", "bf16", "fp32", 64, 64, 32, 2, 2, vec_a=8, vec_b=1,
                          reduction="atomic"))
    # 4-element loads (transpose depth 4 on A, 2 on B), cshuffle; fp32 dW with tile_k 64
    out.append(KernelSpec("gfx1201", "bf16", "bf16", 128, 32, 32, 4, 1, vec_a=4, vec_b=4,
                          epilogue="cshuffle"))
    out.append(KernelSpec("gfx1250", "fp16", "fp32", 32, 128, 64, 1, 2, vec_a=4, vec_b=4,
                          reduction="atomic"))
    # half the block owns a slot of A (128 vectors, 256 threads): a wave-uniform store region
    out += [KernelSpec(t, "fp16", "fp16", 32, 64, 32, 2, 4, vec_a=8, vec_b=8)
            for t in ("gfx1250", "gfx1201", "gfx1151")]
    # 40 narrow loads per thread (gfx1151's budget): no prefetch, and compare-free
    # predicates, else their lane masks spilled SGPRs
    out.append(KernelSpec("gfx1151", "fp16", "fp16", 32, 128, 32, 1, 4, vec_a=1, vec_b=1))
    # the grouped CTA order (geometries.yaml cta_orders) beside its row-major twin above
    out.append(KernelSpec("gfx1250", "fp16", "fp16", 128, 128, 32, 2, 4, vec_a=8, vec_b=8,
                          cta_group=8))
    return out


@pytest.fixture(scope="module")
def sync_entries(tmp_path_factory):
    root = tmp_path_factory.mktemp("objects")
    specs = _sync_specs()
    by_target: dict[str, list[KernelSpec]] = {}
    for s in specs:
        # the grouped gfx1250 kernel is outside the default walk (cta_orders: sm_90 only);
        # the generator builds it all the same
        if s.cta_group == 1:
            assert validate(s, limits=default_jobdata().limits_for(s.target)) == (True, ""), \
                s.label()
        by_target.setdefault(s.target, []).append(s)
    entries = {}
    for target, group in by_target.items():
        # validated above (the grouped one is no walk's: the build's own check would refuse it)
        summary = build(BuildRequest(target=target, cache_dir=str(root), jobs=2), specs=group,
                        validate_specs=False)
        assert summary.failed == 0, summary.failures
        for ik, e in TargetCache(root, target).iter_entries():
            entries[ik] = record_json(e)
    return [(s, entries[s.identity_key()]) for s in specs]


def test_code_objects_of_the_sync_kernel(sync_entries):
    assert len(sync_entries) == 3 * 2 * len(GEOMETRIES) - 2 * 2 + 5 + 3 + 1 + 1
    for spec, e in sync_entries:
        co, isa = e["code_object"], e["isa"]
        t = get_target(spec.target)
        where = spec.label()
        assert co["mach"] == t.e_mach, where
        assert co["has_symbol"] and co["has_descriptor"], where
        assert co["group_segment_fixed_size"] == lds_bytes(spec), where
        assert co["private_segment_fixed_size"] == 0, where
        assert (co["vgpr_spill_count"], co["sgpr_spill_count"]) == (0, 0), where
        assert co["wavefront_size"] == t.wave_size, where
        assert co["max_flat_workgroup_size"] == spec.block_size, where
        atom = t.atom(spec.dtype)
        per_step = ((spec.tile_m // spec.warp_m // atom.m) * (spec.tile_n // spec.warp_n // atom.n)
                    * (spec.tile_k // atom.k))
        assert isa["mma"] > 0 and isa["mma"] % per_step == 0, (where, isa["mma"], per_step)
        assert isa["main_loop_mma"] % per_step == 0, where
        assert isa_problems(spec, isa) == [], where


def test_the_grouped_order_costs_a_few_instructions_before_the_loop_only(sync_entries):
    """The block -> tile map runs once per CTA (one 32-bit division, expanded inline):
    the twins' main loops are the same MMAs and LDS reads; 2026-12-07, gfx1250, 52 twins
    built: +24 to +48 instructions, no VGPR more, main loops equal (3 one shorter)."""
    by_label = {s.label(): e for s, e in sync_entries}
    label = "gfx1250-fp16-t128x128x32-w2x4-v8x8-sync-default-none"
    twin, grouped = by_label[label]["isa"], by_label[label + "-g8"]["isa"]
    for k in ("main_loop_mma", "main_loop_ds_loads", "main_loop_global_loads"):
        assert grouped[k] == twin[k], k
    assert 0 < grouped["instructions"] - twin["instructions"] <= 64


def test_sync_fragments_are_read_at_128_bits(sync_entries):
    """K-contiguous LDS: per atom k-step, each of a wave's (atoms along M + atoms along N)
    fragments is (fragment bytes per lane / 16) 128-bit reads, and no read is narrower."""
    for spec, e in sync_entries:
        isa, atom = e["isa"], get_target(spec.target).atom(spec.dtype)
        lay = mma.layout(atom.form)
        am, an = spec.tile_m // spec.warp_m // 16, spec.tile_n // spec.warp_n // 16
        reads = (am + an) * (lay.ab_elems * 2 // 16) * (spec.tile_k // atom.k)
        where = spec.label()
        assert isa["main_loop_ds_loads"] == isa["main_loop_ds_loads_b128"] == reads, (
            where, isa["main_loop_ds_loads"], reads)
        assert isa["main_loop_ds_load_bytes"] == 16 * reads, where
        assert isa["main_loop_ds_loads_narrow"] == isa["main_loop_ds_loads_b16"] == 0, where


def test_sync_main_loop_has_no_exec_mask_branch(sync_entries):
    """Bounded (buffer) loads and a wave-uniform store region: no s_and_saveexec and no
    s_cbranch_execz/execnz in any sync main loop, on every WMMA target."""
    targets = set()
    for spec, e in sync_entries:
        isa = e["isa"]
        assert (isa["main_loop_exec_branches"], isa["main_loop_saveexec"]) == (0, 0), (
            spec.label(), isa["main_loop_exec_branches"], isa["main_loop_saveexec"])
        assert isa["main_loop_global_loads"] > 0 and isa["buffer_loads"] > 0, spec.label()
        targets.add(spec.target)
    assert targets == {"gfx1250", "gfx1201", "gfx1151"}


def test_async_main_loop_has_no_exec_mask_branch(tmp_path):
    """Selected copy and zero-fill slots: no s_and_saveexec and no s_cbranch_execz/execnz
    in the async main loop, at the narrowest chunks (4 bytes: the most chunks per thread,
    81 exec-mask branches per iteration before) and the widest, smallest and largest tile."""
    want = {((32, 32, 32, 1, 1), 4), ((128, 128, 32, 2, 4), 4), ((64, 64, 32, 2, 2), 16)}
    specs = [s for s in walk("gfx1250", ["fp16"]) if s.k_loop == "async"
             and s.variant == "async.default.none" and (s.geometry, s.chunk_a) in want
             and s.chunk_a == s.chunk_b and s.cta_group == 1 and s.stages == 2]
    assert len(specs) == 3
    summary = build(BuildRequest(target="gfx1250", cache_dir=str(tmp_path), jobs=2), specs=specs)
    assert summary.failed == 0, summary.failures
    cache = TargetCache(tmp_path, "gfx1250")
    for spec in specs:
        e = record_json(cache.read_entry(spec.identity_key()))
        isa, co = e["isa"], e["code_object"]
        assert (isa["main_loop_exec_branches"], isa["main_loop_saveexec"]) == (0, 0), (
            spec.label(), isa["main_loop_exec_branches"], isa["main_loop_saveexec"])
        assert isa["async_copies"] > 0 and isa_problems(spec, isa) == [], spec.label()
        assert co["group_segment_fixed_size"] == lds_bytes(spec), spec.label()
        assert (co["vgpr_spill_count"], co["sgpr_spill_count"],
                co["private_segment_fixed_size"]) == (0, 0, 0), spec.label()
    # verify --level structure holds the async loop to the same rule as the sync one
    for planted in ({"main_loop_exec_branches": 3}, {"main_loop_saveexec": 1}):
        assert isa_problems(spec, {**isa, **planted}) == [
            "async loop branches on the exec mask (predicated loads, copies or stores)"]


def test_same_spec_gives_identical_bytes_in_two_processes():
    spec = KernelSpec("gfx1250", "bf16", "bf16", 64, 64, 32, 2, 2, vec_a=8, vec_b=8,
                      epilogue="cshuffle", reduction="atomic")
    k = emit_ir(spec)
    assert emit_ir(spec).ir_text == k.ir_text
    a = compile_isolated(k.ir_text, "gfx1250", CodegenOptions(), listing="none")
    b = compile_isolated(k.ir_text, "gfx1250", CodegenOptions(), listing="none")
    assert a.ok and b.ok
    assert a.obj.hsaco == b.obj.hsaco


@pytest.fixture(scope="module")
def gfx1250_variants(tmp_path_factory):
    """Every variant of a four-wave cover geometry, fp16 and bf16 (and fp32 dW split-K)."""
    root = tmp_path_factory.mktemp("variants")
    specs = [s for s in walk("gfx1250", ["fp16", "bf16", "fp16_f32"])
             if s.geometry == (64, 64, 32, 2, 2)
             and (s.vec_a, s.vec_b, s.chunk_a, s.chunk_b) in ((8, 8, 0, 0), (0, 0, 16, 16))]
    summary = build(BuildRequest(target="gfx1250", cache_dir=str(root), jobs=2), specs=specs)
    assert summary.failed == 0, summary.failures
    cache = TargetCache(root, "gfx1250")
    return [(s, record_json(cache.read_entry(s.identity_key()))) for s in specs]


def test_variant_isa_on_gfx1250(gfx1250_variants):
    variants = {s.variant for s, _ in gfx1250_variants}
    assert len(variants) == 9
    for spec, e in gfx1250_variants:
        isa, co = e["isa"], e["code_object"]
        assert isa_problems(spec, isa) == [], spec.label()
        assert (co["vgpr_spill_count"], co["private_segment_fixed_size"]) == (0, 0)
        if spec.k_loop == "async":
            assert isa["async_copies"] > 0 and isa["async_waits"] > 0
            assert isa["main_loop_barriers"] == 1  # one barrier per K step
            # K-outer fragments through ds_load_tr16_b128: (2 + 2 atoms) x 2 reads, 128 bits
            assert (isa["main_loop_ds_loads"], isa["main_loop_ds_loads_tr"],
                    isa["main_loop_ds_loads_b128"], isa["main_loop_ds_load_bytes"]) == (
                8, 8, 8, 128), spec.label()
        if spec.reduction == "atomic" and spec.dw_dtype != "fp32":
            kind = "global_atomic_pk_add_" + spec.dw_dtype.replace("fp", "f")
            assert isa[kind] > 0
            for fence in ("global_wb", "global_inv", "buffer_wbl2", "buffer_inv"):
                assert isa[fence] == 0
            assert isa["cas_loops"] == 0
        if spec.reduction == "two_stage":
            assert isa["global_atomic_add_f32"] > 0


# ---- the MFMA targets (gfx942, gfx950: wave64) -------------------------------------------

def _mfma_specs() -> list[KernelSpec]:
    """Per target and variant the walk yields, two specs: fp16 on one geometry, bf16 on the
    next of the spread (the wave64 ladder's 256-wide tiles among them), and an fp32 dW
    atomic; all from the walk, so they are cache jobs."""
    spread = [(64, 64, 32, 2, 2), (32, 32, 32, 1, 1), (256, 64, 32, 2, 2), (64, 256, 32, 2, 2),
              (128, 128, 32, 2, 2), (32, 128, 32, 1, 4), (128, 32, 64, 2, 1)]
    out = []
    for target in ("gfx942", "gfx950"):
        jobs = [s for s in walk(target, ["fp16", "bf16", "bf16_f32"])
                if not is_direct(s)]  # their own objects: test_depthwise_objects, ..._small_c_
        variants = sorted({s.variant for s in jobs})
        for i, v in enumerate(variants):
            for j, key in enumerate(("fp16", "bf16", "bf16_f32")):
                if key == "bf16_f32" and v != "sync.default.atomic":
                    continue
                pick = [s for s in jobs if s.variant == v and s.dtype_key == key
                        and (s.vec_a, s.vec_b) in ((8, 8), (4, 4))]
                geoms = {s.geometry for s in pick}
                g = next(g for k in range(len(spread))
                         if (g := spread[(i + j + k) % len(spread)]) in geoms)
                out.append(next(s for s in pick if s.geometry == g))
    return out


@pytest.fixture(scope="module")
def mfma_cache(tmp_path_factory):
    root = tmp_path_factory.mktemp("mfma")
    specs = _mfma_specs()
    for target in ("gfx942", "gfx950"):
        group = [s for s in specs if s.target == target]
        # validated above (the grouped one is no walk's: the build's own check would refuse it)
        summary = build(BuildRequest(target=target, cache_dir=str(root), jobs=2), specs=group,
                        validate_specs=False)
        assert summary.failed == 0, summary.failures
    entries = {}
    for target in ("gfx942", "gfx950"):
        for ik, e in TargetCache(root, target).iter_entries():
            entries[ik] = record_json(e)
    return root, [(s, entries[s.identity_key()]) for s in specs]


def test_mfma_code_objects_per_target_and_variant(mfma_cache):
    _, rows = mfma_cache
    seen = {(s.target, s.variant) for s, _ in rows}
    assert seen == {(t, f"sync.{e}.{r}") for t in ("gfx942", "gfx950")
                    for e, r in (("default", "none"), ("default", "atomic"),
                                 ("default", "two_stage"), ("cshuffle", "none"),
                                 ("cshuffle", "atomic"))}
    assert any(s.tile_m == 256 or s.tile_n == 256 for s, _ in rows)
    for spec, e in rows:
        co, isa, t = e["code_object"], e["isa"], get_target(spec.target)
        where = spec.label()
        assert co["mach"] == t.e_mach and co["e_flags"] & 0xFF == t.e_mach, where
        assert (co["wavefront_size"], co["max_flat_workgroup_size"]) == (64, spec.block_size)
        assert co["group_segment_fixed_size"] == lds_bytes(spec), where
        assert co["private_segment_fixed_size"] == 0, where
        assert (co["vgpr_spill_count"], co["sgpr_spill_count"]) == (0, 0), where
        assert isa["scratch_ops"] == 0, where
        atom = t.atom(spec.dtype)
        per_step = ((spec.tile_m // spec.warp_m // 16) * (spec.tile_n // spec.warp_n // 16)
                    * (spec.tile_k // atom.k))
        # v_mfma only, a whole number of K tiles of them, exactly one K tile per iteration
        assert isa["mfma"] == isa["mma"] > 0 and isa["wmma"] == 0, where
        assert isa["mma"] % per_step == 0 and isa["main_loop_mma"] == per_step, where
        # accumulators in VGPRs ("amdgpu-agpr-alloc"="0": no copy back into AGPRs each K
        # tile); AGPRs only as LLVM's spill room past the 256 VGPRs (no scratch either way)
        assert co["agpr_count"] == 0 or co["vgpr_count"] >= 256, (where, co["agpr_count"])
        assert isa["device_cache_ops"] == isa["cas_loops"] == isa["global_atomic_cmpswap"] == 0
        for fence in ("buffer_wbl2", "buffer_inv", "global_wb", "global_inv"):
            assert isa[fence] == 0, (where, fence)
        if spec.reduction == "atomic" and spec.dw_dtype != "fp32":
            assert isa["global_atomic_pk_add_" + spec.dw_dtype.replace("fp", "f")] > 0, where
        if spec.reduction == "two_stage" or (spec.reduction, spec.dw_dtype) == ("atomic",
                                                                                "fp32"):
            assert isa["global_atomic_add_f32"] > 0, where
        assert isa_problems(spec, isa) == [], where


def test_mfma_fragments_are_read_whole(mfma_cache):
    """K-contiguous LDS: per K tile each lane reads exactly its fragments' bytes (8 per
    16x16x16 fragment on gfx942, 16 per 16x16x32 one on gfx950), never narrower than one
    fragment, no 16-bit reads."""
    _, rows = mfma_cache
    for spec, e in rows:
        isa = e["isa"]
        lay = mma.layout(get_target(spec.target).atom(spec.dtype).form)
        frag = lay.ab_elems * 2
        am, an = spec.tile_m // spec.warp_m // 16, spec.tile_n // spec.warp_n // 16
        want = (am + an) * frag * (spec.tile_k // lay.k)
        where = spec.label()
        assert isa["main_loop_ds_load_bytes"] == want, (where, isa["main_loop_ds_load_bytes"])
        assert isa["main_loop_ds_loads"] * frag <= want and isa["main_loop_ds_loads_b16"] == 0


def test_mfma_cache_passes_verify_structure(mfma_cache):
    from wgradcache.pipeline.verify import VerifyRequest, verify

    root, rows = mfma_cache
    for target in ("gfx942", "gfx950"):
        rep = verify(VerifyRequest(cache_dir=str(root), targets=(target,), level="structure"))
        assert rep.failures == [], rep.failures
        passed = [c for c in rep.passed_cases if c[2] == "structure"]
        specs = [s for s, _ in rows if s.target == target]
        assert {s.identity_key() for s in specs} <= {c[0] for c in passed}
        # and each two-stage (dW dtype, replicas)'s stage-2 companion
        stage2 = {(s.dw_dtype, s.ws_replicas) for s in specs if s.reduction == "two_stage"}
        assert len(passed) == len(specs) + len(stage2) and stage2


@pytest.mark.parametrize("label", ["gfx942-fp16-t128x128x32-w2x2-v8x8-sync-default-none",
                                   "gfx950-bf16-t64x64x64-w2x2-v8x8-sync-default-atomic"])
def test_mfma_main_loop_copies_no_accumulator(label):
    """"amdgpu-agpr-alloc"="0" (lower_llvm): the MFMAs read and write their accumulators in
    VGPRs, so the K loop moves none between iterations. Without it LLVM 22 put the
    loop-carried accumulators in AGPRs and copied most MFMAs' results back (gfx942
    t128x128x32-w2x2: 64 v_accvgpr_mov_b32 a K tile for 32 MFMAs, 210 instructions)."""
    from wgradcache.compile.isa import main_loop, parse_listing
    from wgradcache.model.spec import from_label

    k = emit_ir(from_label(label))
    assert '"amdgpu-agpr-alloc"="0"' in k.ir_text.split("\n{", 1)[0]
    out = compile_isolated(k.ir_text, label.split("-")[0], CodegenOptions(), listing="auto")
    assert out.ok, out.error
    code, labels = parse_listing(out.obj.asm)
    loop = main_loop(code, labels)
    body = [ins.mnemonic for ins in loop.body(code)]
    assert sum(m.startswith("v_mfma") for m in body) > 0
    assert not [m for m in body if m.startswith("v_accvgpr")], label


def test_only_the_mfma_targets_say_no_agprs():
    from wgradcache.model.spec import from_label

    for label in ("gfx1250-fp16-t64x64x32-w2x2-v8x8-sync-default-none",
                  "gfx1201-fp16-t64x64x32-w2x2-v8x8-sync-default-none"):
        assert "amdgpu-agpr-alloc" not in emit_ir(from_label(label)).ir_text, label
