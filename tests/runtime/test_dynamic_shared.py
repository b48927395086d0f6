"""sm_90 kernels past 48 KB of shared memory: an extern (dynamic) array in the PTX, no
static shared bytes in the cubin, the launch opting in to the size and passing it; the
kernels below 48 KB keep their static allocation (and their bytes).

The fake driver refuses a launch past the function's dynamic limit (as the driver does)
and one that passes less than the kernel's array needs (the real one would run past it)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from fake_cuda import FakeCuda

import wgradcache.runtime.cuda as cuda_mod
from tests.conftest import small_geometries
from wgradcache.cache.store import TargetCache
from wgradcache.cli import main
from wgradcache.compile.codegen import compile_ir
from wgradcache.model.spec import KernelSpec, dynamic_lds_bytes, from_label, lds_bytes
from wgradcache.model.targets import get_target
from wgradcache.pipeline.build import BuildRequest, build
from wgradcache.runtime.cuda import CudaSession
from wgradcache.wgrad.emit import emit_ir

BIG = (128, 128, 64, 4, 2)  # both loops past 48 KB: two K-outer stages of 64 x 272 x 2 B
SMALL = (64, 64, 32, 2, 2)


def _spec(geometry, k_loop: str) -> KernelSpec:
    tm, tn, tk, wm, wn = geometry
    vec = "c16x16-async" if k_loop == "async" else "v8x8-sync"
    return from_label(f"sm_90-fp16-t{tm}x{tn}x{tk}-w{wm}x{wn}-{vec}-default-none")


def test_the_rule_is_the_targets_static_limit():
    t = get_target("sm_90")
    assert (t.lds_static_bytes, t.lds_bytes) == (49152, 232448)
    assert not t.lds_dynamic(49152) and t.lds_dynamic(49153)
    assert not any(get_target(n).lds_dynamic(1 << 20) for n in ("gfx1250", "gfx942"))
    for k_loop in ("sync", "async"):
        big, small = _spec(BIG, k_loop), _spec(SMALL, k_loop)
        assert dynamic_lds_bytes(big) == lds_bytes(big) == 69632
        assert dynamic_lds_bytes(small) == 0 < lds_bytes(small) <= 49152


@pytest.mark.parametrize("k_loop", ["sync", "async"])
def test_past_48_kb_the_array_is_extern_and_the_cubin_has_no_static_shared(k_loop):
    big, small = _spec(BIG, k_loop), _spec(SMALL, k_loop)
    ir = emit_ir(big).ir_text
    assert "@lds_dynamic = external addrspace(3) global [0 x i8], align 16" in ir
    assert "internal addrspace(3)" not in ir
    obj = compile_ir(ir, "sm_90", listing="assembly")
    assert ".extern .shared .align 16 .b8 lds_dynamic[];" in obj.asm
    assert obj.info.static_shared_bytes == 0
    assert obj.info.local_bytes == 0  # no stack frame
    ir_small = emit_ir(small).ir_text
    assert "lds_dynamic" not in ir_small
    assert f"internal addrspace(3) global [{lds_bytes(small)} x i8]" in ir_small
    obj = compile_ir(ir_small, "sm_90", listing="none")
    assert obj.info.static_shared_bytes == lds_bytes(small)


@pytest.fixture(scope="module")
def big_cache(tmp_path_factory):
    root = tmp_path_factory.mktemp("dynsmem")
    geo = small_geometries(root, cover=(BIG,))
    s = build(BuildRequest(target="sm_90", dtypes=("fp16",), geometries_file=str(geo),
                           variants=("sync.default.none", "async.default.atomic"),
                           cache_dir=str(root / "c"), jobs=1))
    assert (s.jobs, s.failed) == (2, 0)
    return {"cache": root / "c", "geometries": geo}


def _verify(c, *extra):
    return CliRunner().invoke(main, ["verify", "--from-cache", "--cache-dir", str(c["cache"]),
                                     "--geometries", str(c["geometries"]), "--json", *extra])


def test_structure_accounts_for_the_dynamic_bytes(big_cache):
    r = _verify(big_cache, "--level", "structure")
    doc = json.loads(r.stdout)
    assert r.exit_code == 0, doc["failures"]
    assert doc["checked"] == 2
    for _, e in TargetCache(big_cache["cache"], "sm_90").iter_entries():
        spec = KernelSpec.from_dict(e.identity)
        assert (e.code_object["static_shared_bytes"], e.code_object["dynamic_shared_bytes"]
                ) == (0, lds_bytes(spec)) and lds_bytes(spec) > 49152


def test_the_launch_opts_in_and_passes_the_size(big_cache, monkeypatch):
    fake = FakeCuda()
    monkeypatch.setattr(cuda_mod, "cuda_driver", lambda: fake)
    r = _verify(big_cache, "--level", "numerics", "--device", "cuda")
    doc = json.loads(r.stdout)
    assert r.exit_code == 0, doc["failures"]
    assert doc["failed"] == 0 and fake.faults == []
    assert fake.launches  # every launch passed 69632 B after the opt-in (the fake checks)


def test_without_the_opt_in_the_launch_is_refused(big_cache, monkeypatch):
    fake = FakeCuda()
    monkeypatch.setattr(cuda_mod, "cuda_driver", lambda: fake)
    real = CudaSession.launch

    def no_opt_in(self, kernel, dims, kernargs, offsets=()):
        kernel.dynamic_shared = dims.shared  # as if the attribute were set: it is not
        return real(self, kernel, dims, kernargs, offsets)
    monkeypatch.setattr(CudaSession, "launch", no_opt_in)
    r = _verify(big_cache, "--level", "numerics", "--device", "cuda")
    doc = json.loads(r.stdout)
    assert r.exit_code == 1
    assert len(doc["failures"]) == 2
    assert all("CUDA_ERROR_INVALID_VALUE" in f["reason"] for f in doc["failures"])


def test_deeper_rings_record_and_launch_their_dynamic_bytes(tmp_path, monkeypatch):
    """The async loop's 3- and 4-stage rings of BIG (geometries.yaml's stages): structure
    holds each binary to no static shared bytes, and every launch opts in and passes the
    ring's own size (the fake refuses any other: 2, 3 and 4 stages of 34816 B)."""
    geo = small_geometries(tmp_path, cover=(BIG,), stages=True)
    s = build(BuildRequest(target="sm_90", dtypes=("fp16",), geometries_file=str(geo),
                           variants=("async.default.atomic",), cache_dir=str(tmp_path / "c"),
                           jobs=1))
    assert (s.jobs, s.failed) == (3, 0)
    rings = {e.label.rsplit("-", 1)[-1]: dynamic_lds_bytes(from_label(e.label))
             for _, e in TargetCache(tmp_path / "c", "sm_90").iter_entries()}
    assert rings == {"atomic": 69632, "s3": 104448, "s4": 139264}
    c = {"cache": tmp_path / "c", "geometries": geo}
    r = _verify(c, "--level", "structure")
    assert r.exit_code == 0, r.stdout
    fake = FakeCuda()
    monkeypatch.setattr(cuda_mod, "cuda_driver", lambda: fake)
    r = _verify(c, "--level", "numerics", "--device", "cuda")
    doc = json.loads(r.stdout)
    assert r.exit_code == 0 and doc["failed"] == 0 and fake.faults == [], doc["failures"]
    assert {launch.symbol.rsplit("_", 1)[-1] for launch in fake.launches} == {
        "atomic", "s3", "s4"}
