"""sm_90 on a CPU-only machine: NVPTX codegen, ptxas cubins, their structure from the ELF,
PTX statistics, the build into .cubin blobs, and `verify --device cuda` without a GPU.

ptxas comes from the test extra (``nvidia-cuda-nvcc``) or a CUDA toolkit; without it these
tests fail with the install hint, as a build would.
"""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from tests.conftest import small_geometries
from wgradcache.cache.entry import Entry
from wgradcache.cache.store import TargetCache, sha256_bytes
from wgradcache.cli import main
from wgradcache.compile.codegen import CodegenError, compile_ir
from wgradcache.compile.cubin import EM_CUDA, nv_info, read_cubin
from wgradcache.kernel.builder import KernelBuilder
from wgradcache.kernel.ir import f32, ptr
from wgradcache.kernel.lower import lower
from wgradcache.model.backends import backend_of
from wgradcache.model.spec import from_label, lds_bytes
from wgradcache.pipeline.build import BuildRequest, build
from wgradcache.wgrad.abi import WGRAD_ARGS, arg_names, kernarg_layout, kernarg_size, record_facts
from wgradcache.wgrad.emit import emit_ir

ATOMIC = "sm_90-fp16-t64x64x32-w2x2-v8x8-sync-default-atomic"


@pytest.fixture(scope="module")
def atomic_obj():
    return compile_ir(emit_ir(from_label(ATOMIC)).ir_text, "sm_90")


def test_cubin_structure_from_the_elf(atomic_obj):
    spec = from_label(ATOMIC)
    data = atomic_obj.hsaco
    assert data[:4] == b"\x7fELF" and int.from_bytes(data[18:20], "little") == EM_CUDA
    co = read_cubin(data)  # the bytes alone: no ptxas report
    assert co.mach == 90 and co.target == "nvptx64-nvidia-cuda--sm_90"
    assert co.symbol == "wgrad_" + ATOMIC.replace("-", "_") and co.has_nv_info
    assert co.static_shared_bytes == lds_bytes(spec) == 18432  # 2 K-outer stages
    assert co.max_threads_per_block == spec.block_size == 128
    # every parameter where runtime/abi.py packs it, and the block's size
    assert [(a.offset, a.size) for a in co.args] == [(o, s) for _, o, s in
                                                     kernarg_layout(WGRAD_ARGS)]
    assert co.param_bytes == kernarg_size(WGRAD_ARGS) == 168
    # registers from the ELF's EIATTR_REGCOUNT: what ptxas -v reports for the same PTX
    assert co == atomic_obj.info and co.registers > 32
    assert co.local_bytes == 0  # no stack frame: no spills
    # the record in NVIDIA's words, the parameters by their ABI names
    rec = co.record(record_facts(spec))
    assert set(rec) == set(backend_of("sm_90").record_fields)
    assert [a["name"] for a in rec["args"]] == list(arg_names(WGRAD_ARGS))
    assert rec["args"][0] == {"name": "dy_ptr", "offset": 0, "size": 8,
                              "value_kind": "by_value"}
    assert (rec["registers"], rec["static_shared_bytes"], rec["dynamic_shared_bytes"],
            rec["local_bytes"], rec["max_threads_per_block"]) == (
        co.registers, 18432, 0, 0, 128)


def test_sass_statistics_of_the_atomic_kernel(atomic_obj):
    """The build's listing is nvdisasm's SASS of the cubin (what structure derives from a
    stored blob); the PTX is the "assembly" listing."""
    def isa_stats(obj):
        return backend_of("sm_90").isa_stats(obj.asm, obj.listing)

    isa = isa_stats(atomic_obj)
    assert atomic_obj.listing == "disassembly"
    # 2x2 waves of 32x32: 2x2 atoms of 16x16, 2 k-steps, 2 m16n8k16 each = 16 per K tile
    assert isa["main_loop_mma"] == 16 == isa["mma"]
    # the pipelined loop over two LDS stages: one barrier per K tile; fragments read from
    # the K-outer tiles by one ldmatrix .x4 .trans per 16x16 fragment: (2 + 2) x 2 k-steps
    assert isa["main_loop_barriers"] == 1 and isa["main_loop_ds_loads"] == 8
    assert atomic_obj.asm.count("LDSM.16.MT88.4") == 8
    # a lane holds (c, c+1) pairs: 2x2 atoms x 4 pairs, one packed REDG each
    assert isa["global_atomic_pk_add_f16"] == 16 == isa["global_atomics"]
    assert isa["cas_loops"] == 0 == isa["global_atomic_cmpswap"] == isa["device_cache_ops"]
    assert isa["scratch_ops"] == 0
    assert "HMMA.16816.F32 " in atomic_obj.asm and "REDG.E.ADD.F16x2" in atomic_obj.asm
    ptx = compile_ir(emit_ir(from_label(ATOMIC)).ir_text, "sm_90", listing="assembly")
    assert ptx.listing == "ptx" and ptx.hsaco == atomic_obj.hsaco
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx.asm
    assert "red.relaxed.gpu.global.add.noftz.f16x2" in ptx.asm
    assert ptx.asm.count("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16") == 8
    p = isa_stats(ptx)
    assert (p["mma"], p["global_atomic_pk_add_f16"], p["main_loop_barriers"]) == (16, 16, 1)


def test_bf16_and_fp32_dw_atomics_and_the_two_stage_workspace():
    isa_stats = backend_of("sm_90").isa_stats
    bf = compile_ir(emit_ir(from_label(
        "sm_90-bf16-t64x64x32-w2x2-v8x8-sync-default-atomic")).ir_text, "sm_90")
    assert "HMMA.16816.F32.BF16 " in bf.asm
    assert isa_stats(bf.asm)["global_atomic_pk_add_bf16"] == 16
    for label in ("sm_90-bf16-dwfp32-t64x64x32-w2x2-v8x8-sync-default-atomic",
                  "sm_90-fp16-t64x64x32-w2x2-v8x8-sync-default-two_stage-wsr8"):
        s = isa_stats(compile_ir(emit_ir(from_label(label)).ir_text, "sm_90").asm)
        assert s["global_atomic_add_f32"] == 32 == s["global_atomics"], label
        assert s["cas_loops"] == 0 == s["device_cache_ops"]


def test_static_shared_memory_limit_is_48k():
    """targets.py's lds_static_bytes for sm_90: 48 KB static compiles, 4 bytes more is
    ptxas's error (it exits non-zero: a CodegenError naming it), so the lowering makes
    such an allocation dynamic (an extern array: no static bytes in the cubin)."""
    def kernel(nbytes):
        kb = KernelBuilder("lds_probe", block_size=32)
        out = kb.arg("out", ptr(f32))
        lds = kb.ptr_cast(kb.lds("big", nbytes), f32)
        tid = kb.thread_id()
        kb.store(kb.gep(lds, tid), kb.const(1.0, f32))
        kb.barrier()
        kb.store(kb.gep(out, tid), kb.load(kb.gep(lds, kb.add(tid, nbytes // 4 - 32))))
        return lower(kb.finish(), "sm_90")

    ok = compile_ir(kernel(49152), "sm_90")
    assert read_cubin(ok.hsaco).static_shared_bytes == 49152
    static = kernel(49156).replace("external addrspace(3) global [0 x i8]",
                                   "internal addrspace(3) global [49156 x i8] undef")
    assert "[49156 x i8] undef" in static
    with pytest.raises(CodegenError, match="ptxas failed: .*too much shared data"):
        compile_ir(static, "sm_90")
    dynamic = compile_ir(kernel(49156), "sm_90")
    assert read_cubin(dynamic.hsaco).static_shared_bytes == 0


def test_nv_info_parser():
    assert nv_info(bytes.fromhex("042f08000a00000014000000")) == [
        (0x2F, bytes.fromhex("0a00000014000000"))]
    assert nv_info(bytes.fromhex("031bff00011c")) == [(0x1B, b"\xff\x00"), (0x1C, b"")]
    for bad in ("042f0800", "04", "092f0000"):
        with pytest.raises(ValueError):
            nv_info(bytes.fromhex(bad))


def test_hostile_cubins_are_one_value_error(atomic_obj):
    data = atomic_obj.hsaco
    for bad in (data[:64], data[:len(data) // 2], b"\x7fELF" + b"\0" * 14 + b"\xbe\x00"):
        with pytest.raises(ValueError):
            read_cubin(bad)


def test_build_publishes_cubins_and_shares_one_blob_per_ir(tmp_path):
    """fp16 and fp16_f32 two-stage kernels differ only in name: one build compiles both
    and both entries stay whole, relinked to one blob (the second used to overwrite it)."""
    geo = small_geometries(tmp_path, cover=((32, 32, 32, 1, 1),))
    req = BuildRequest(target="sm_90", dtypes=("fp16", "fp16_f32"),
                       variants=("sync.default.two_stage", "sync.default.atomic"),
                       geometries_file=str(geo), cache_dir=str(tmp_path / "c"), jobs=1)
    s = build(req)
    assert (s.jobs, s.failed, s.rejected) == (4, 0, 0)
    assert s.built + s.relinked == 4 and s.relinked >= 1
    cache = TargetCache(tmp_path / "c", "sm_90")
    entries = [e for _, e in cache.iter_entries()]
    assert len(entries) == 4 and all(isinstance(e, Entry) for e in entries)
    for e in entries:
        data = cache.read_blob(e.blob)
        assert sha256_bytes(data) == e.blob_sha256
        assert read_cubin(data).symbol == e.symbol
        assert cache.blob_path(e.blob).suffix == ".cubin"
    two = [e for e in entries if e.variant == "sync.default.two_stage"]
    assert len({e.blob for e in two}) == 1
    r = CliRunner().invoke(main, ["verify", "--from-cache", "--cache-dir", str(tmp_path / "c"),
                                  "--geometries", str(geo), "--level", "structure", "--json"])
    doc = json.loads(r.stdout)
    assert not doc["failures"], doc["failures"]
    assert r.exit_code == 0


def test_an_async_entry_by_its_label_show_and_structure(tmp_path):
    """The cp.async loop built into the cache: structure passes from the cubin (LDGSTS
    counted as async copies, a wait, one barrier per K tile), and ``show`` / ``explain``
    find an sm_90 entry by its label (they once took only labels starting with gfx)."""
    geo = small_geometries(tmp_path, cover=((32, 32, 32, 1, 1),))
    c = str(tmp_path / "c")
    s = build(BuildRequest(target="sm_90", dtypes=("fp16",), variants=("async.default.none",),
                           geometries_file=str(geo), cache_dir=c, jobs=1))
    assert (s.jobs, s.failed) == (1, 0)  # c16x16: c4x4 is over the loads budget at one wave
    r = CliRunner().invoke(main, ["verify", "--from-cache", "--cache-dir", c, "--geometries",
                                  str(geo), "--level", "structure", "--json"])
    assert r.exit_code == 0, r.stdout
    label = "sm_90-fp16-t32x32x32-w1x1-c16x16-async-default-none"
    r = CliRunner().invoke(main, ["show", label, "--cache-dir", c, "--json"])
    assert r.exit_code == 0, r.output
    e = json.loads(r.stdout)
    assert e["label"] == label and e["variant"] == "async.default.none"
    assert e["isa"]["main_loop_async_copies"] > 0 and e["isa"]["main_loop_barriers"] == 1
    assert e["isa"]["main_loop_ds_loads_tr"] > 0 and e["isa"]["main_loop_ds_stores"] == 0
    # the copies are LDGSTS and their commit LDGDEPBAR: neither is a global load
    assert e["isa"]["main_loop_global_loads"] == 0 and e["isa"]["async_waits"] > 0
    # for people, in NVIDIA's words: one register file, static + dynamic shared, the stack
    r = CliRunner().invoke(main, ["show", label, "--cache-dir", c])
    rows = {}
    for line in r.output.splitlines():
        cells = [x.strip() for x in line.strip("│┃ ").split("│")]
        if len(cells) == 2:
            rows[cells[0]] = cells[1]
    co = e["code_object"]
    assert (rows["registers"], rows["static shared bytes"], rows["dynamic shared bytes"],
            rows["local (stack) bytes"], rows["max threads per block"]) == (
        str(co["registers"]), str(co["static_shared_bytes"]), "0", "0", "32")
    assert not {"vgpr", "sgpr", "agpr", "LDS bytes", "scratch bytes"} & set(rows)
    r = CliRunner().invoke(main, ["explain", label, "--cache-dir", c, "--json"])
    assert r.exit_code == 0, r.output


def test_verify_device_cuda_without_a_gpu_is_one_line(tmp_path, monkeypatch):
    geo = small_geometries(tmp_path, cover=((32, 32, 32, 1, 1),))
    c = str(tmp_path / "c")
    build(BuildRequest(target="sm_90", dtypes=("fp16",), variants=("sync.default.none",),
                       geometries_file=str(geo), cache_dir=c, jobs=1))
    import wgradcache.runtime.cuda as cuda

    def missing():
        raise ModuleNotFoundError("No module named 'cuda'")
    monkeypatch.setattr(cuda, "cuda_driver", missing)
    r = CliRunner().invoke(main, ["verify", "--from-cache", "--cache-dir", c, "--geometries",
                                  str(geo), "--level", "numerics", "--device", "cuda"])
    assert r.exit_code == 1
    fails = [ln for ln in r.output.splitlines() if ln.startswith("FAIL")]
    assert fails == ["FAIL [numerics] sm_90: --device cuda: no device: cuda-bindings "
                     "unavailable (ModuleNotFoundError: No module named 'cuda'); pip install "
                     "'wgradcache[nvidia]' on a machine with an NVIDIA driver"]
    r = CliRunner().invoke(main, ["verify", "--from-cache", "--cache-dir", c, "--geometries",
                                  str(geo), "--level", "numerics", "--device", "hip"])
    assert r.exit_code == 1
    assert "FAIL [numerics] sm_90: --device hip: sm_90 code objects run through cuda, not hip" \
        in r.output
    # auto: one note, then the emulator proves the kernels
    r = CliRunner().invoke(main, ["verify", "--from-cache", "--cache-dir", c, "--geometries",
                                  str(geo), "--level", "numerics", "--device", "auto"])
    assert r.exit_code == 0, r.output
    assert "cuda: no sm_90 device (cuda-bindings unavailable" in r.output


def test_a_warp_uniform_if_is_a_plain_branch():
    """Eight warps over a 64x32 tile leave the loaders' last slot wave-aligned ragged: the
    IR's uniform ``if`` lowers to a plain branch on NVPTX (readfirstlane is AMD's)."""
    ir = emit_ir(from_label("sm_90-fp16-t64x32x32-w4x2-v8x8-sync-default-atomic")).ir_text
    assert "readfirstlane" not in ir
    obj = compile_ir(ir, "sm_90")
    assert read_cubin(obj.hsaco).max_threads_per_block == 256


def test_compile_writes_cubin_and_ptx_in_nvidia_words(tmp_path):
    """`compile` of an sm_90 kernel: .cubin and .ptx (not .hsaco and .s), and the summary
    says registers, static and dynamic shared bytes, local bytes and max threads."""
    label = "sm_90-fp16-t128x128x64-w4x2-v8x8-sync-default-atomic"
    r = CliRunner().invoke(main, ["compile", label, "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert [ln.split()[0] for ln in lines[:4]] == ["ll", "ptx", "cubin", "json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"{label}.{ext}" for ext in ("ll", "ptx", "cubin", "json"))
    assert (tmp_path / f"{label}.cubin").read_bytes()[:4] == b"\x7fELF"
    assert ".entry wgrad_sm_90_fp16" in (tmp_path / f"{label}.ptx").read_text()
    assert re.fullmatch(r"registers \d+, shared 0 B static \+ 69632 B dynamic, local 0 B, "
                        r"max threads 256; mma 64 barriers \d+ atomics 32", lines[4]), lines[4]
