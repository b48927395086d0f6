"""verify --device cuda on a small sm_90 cache with a (fake) sm_90 device: the stored
cubins are what runs, their parameters reach the kernel through ``kernelParams`` exactly
where ``runtime/abi.py`` packs them, and a launch that forgets to zero dW fails."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from fake_cuda import FakeCuda

import wgradcache.runtime.cuda as cuda_mod
from tests.conftest import small_geometries
from wgradcache.cache.entry import record_json
from wgradcache.cache.store import TargetCache
from wgradcache.cli import main
from wgradcache.pipeline.build import BuildRequest, build
from wgradcache.runtime.cuda import CudaSession


@pytest.fixture(scope="module")
def sm90_cache(tmp_path_factory):
    root = tmp_path_factory.mktemp("sm90")
    geo = small_geometries(root)
    s = build(BuildRequest(target="sm_90", dtypes=("fp16", "bf16"), geometries_file=str(geo),
                           cache_dir=str(root / "c"), jobs=1))
    assert s.failed == 0 and s.jobs == 18  # 10 sync + 8 cp.async kernels
    return {"cache": root / "c", "geometries": geo}


@pytest.fixture
def fake_cuda(monkeypatch):
    fake = FakeCuda()
    monkeypatch.setattr(cuda_mod, "cuda_driver", lambda: fake)
    return fake


def _verify(c, *extra):
    return CliRunner().invoke(main, ["verify", "--from-cache", "--cache-dir", str(c["cache"]),
                                     "--geometries", str(c["geometries"]), "--json",
                                     "--level", "numerics", *extra])


def test_verify_device_cuda_launches_the_stored_cubins(sm90_cache, fake_cuda):
    r = _verify(sm90_cache, "--device", "cuda")
    doc = json.loads(r.stdout)
    assert r.exit_code == 0, doc["failures"]
    assert (doc["ok"], doc["checked"], doc["failed"]) == (True, 20, 0)  # 18 + 2 stage 2
    assert doc["notes"] == ["cuda: numerics ran on the sm_90 device 0 (Fake H200) "
                            "(stored code objects)"]
    entries = [record_json(e) for _, e in TargetCache(sm90_cache["cache"], "sm_90")
               .iter_entries()]
    runs = {e["symbol"]: 1 if e["identity"]["reduction"] == "none" else 5 for e in entries}
    stage1 = [ln.symbol for ln in fake_cuda.launches if not ln.symbol.startswith("wgrad_stage2")]
    assert sorted(stage1) == sorted(s for s, n in runs.items() for _ in range(n))
    assert fake_cuda.faults == [] and fake_cuda.allocations == {} and fake_cuda.retained == 0
    # the split-K launches carry the degree and slice the ABI says, at their offsets
    first = next(ln for ln in fake_cuda.launches if ln.grid[2] == 2)
    assert first.values["ks_count"] == 2 and first.values["ks"] % 32 == 0


def test_a_device_that_is_not_zeroed_fails_exactly_the_split_k_entries(sm90_cache, fake_cuda,
                                                                       monkeypatch):
    monkeypatch.setattr(CudaSession, "memset", lambda self, addr, value, n: None)
    r = _verify(sm90_cache, "--device", "auto")
    doc = json.loads(r.stdout)
    assert r.exit_code == 1
    failed = sorted(f["label"] for f in doc["failures"])
    entries = [record_json(e) for _, e in TargetCache(sm90_cache["cache"], "sm_90")
               .iter_entries()]
    assert failed == sorted(e["label"] for e in entries
                            if e["identity"]["reduction"] != "none")


def test_no_sm90_device_among_the_gpus(sm90_cache, monkeypatch):
    fake = FakeCuda(archs=("sm_80",))
    monkeypatch.setattr(cuda_mod, "cuda_driver", lambda: fake)
    r = _verify(sm90_cache, "--device", "cuda")
    doc = json.loads(r.stdout)
    assert r.exit_code == 1
    assert [f["reason"] for f in doc["failures"]] == [
        "--device cuda: no device: 1 CUDA device(s), none is sm_90"]


def test_no_reproduce_on_a_machine_with_another_toolchain(sm90_cache, fake_cuda, monkeypatch):
    """The device machine has no libLLVM-22 (another codegen, another digest): reproduce
    cannot pass there; --no-reproduce keeps the IR check and runs numerics on the device."""
    import wgradcache.pipeline.workers as workers

    real = workers.codegen_context

    def other(target=None):
        options, toolchain, _ = real(target)
        return options, {**toolchain, "codegen": "llvmlite"}, "0" * 64
    monkeypatch.setattr(workers, "codegen_context", other)
    r = _verify(sm90_cache, "--device", "cuda")
    doc = json.loads(r.stdout)
    assert r.exit_code == 1 and {f["level"] for f in doc["failures"]} == {"reproduce"}
    assert fake_cuda.launches == []
    r = _verify(sm90_cache, "--device", "cuda", "--no-reproduce")
    doc = json.loads(r.stdout)
    assert r.exit_code == 0, doc["failures"]
    assert len({ln.symbol for ln in fake_cuda.launches}) == 18 + 2  # entries + stage 2


def test_no_reproduce_still_catches_a_blob_of_other_ir(sm90_cache, fake_cuda, tmp_path):
    """An entry re-pointed at another entry's (valid, whole) blob: structure catches the
    symbol; an entry whose recorded toolchain was edited makes its IR hash elsewhere."""
    import shutil

    c = tmp_path / "c"
    shutil.copytree(sm90_cache["cache"], c)
    cache = TargetCache(c, "sm_90")
    ik, e = next((ik, e) for ik, e in cache.iter_entries())
    doc = record_json(e)
    doc["toolchain"] = {**doc["toolchain"], "linker_version": "ptxas: another"}
    cache.entry_path(ik).write_text(json.dumps(doc, sort_keys=True))
    r = CliRunner().invoke(main, ["verify", "--from-cache", "--cache-dir", str(c),
                                  "--geometries", str(sm90_cache["geometries"]), "--json",
                                  "--level", "numerics", "--device", "cuda", "--no-reproduce"])
    out = json.loads(r.stdout)
    assert r.exit_code == 1
    assert [(f["label"], f["reason"]) for f in out["failures"]] == [
        (e.label, "the stored binary is not this IR: re-emitted IR hashes to another "
                  "content key")]
