"""The toolchain preflight: a missing tool stops build, refresh, compile and verify's
reproduce before their first job, in one line naming the tool, the target and the install
command, with no failure record and nothing written; every tool present, they build.

Each tool goes missing by pointing its discovery at an empty folder: PATH and ROCM_PATH,
the CUDA tool folders (``discovery.cuda_tool_dirs``) and the libLLVM candidates.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import small_geometries
from wgradcache.cli import main
from wgradcache.compile import discovery, libllvm, lldlink, native, preflight, toolchain

_CACHED = (lldlink._select_linker, lldlink._in_process, lldlink._ld_lld, native.native_library,
           libllvm.system_llvm, toolchain.nvptx_identity, toolchain._toolchain_identity)

NV = "install it with `pip install 'wgradcache[nvidia]'` or a CUDA toolkit"
WHERE = "($CUDA_HOME/bin, PATH, /usr/local/cuda*/bin, the {} wheel)"


def _clear() -> None:
    for f in _CACHED:
        f.cache_clear()


@pytest.fixture
def empty(monkeypatch, tmp_path):
    """An empty folder, and the found tools' caches cleared before and after the test."""
    d = tmp_path / "empty"
    d.mkdir()
    for var in ("CUDA_HOME", "CUDA_PATH", discovery.PTXAS_ENV, discovery.NVDISASM_ENV,
                discovery.CODEGEN_ENV, lldlink.LINKER_ENV):
        monkeypatch.delenv(var, raising=False)
    _clear()
    yield d
    _clear()


def _no_cuda(monkeypatch, empty: Path, keep: str = "") -> None:
    """The CUDA tool folders are the empty one; ``keep`` ("ptxas" or "nvdisasm") is still
    found through its environment variable."""
    env = {"ptxas": discovery.PTXAS_ENV, "nvdisasm": discovery.NVDISASM_ENV}
    real = {t: str(f()) for t, f in (("ptxas", discovery.find_ptxas),
                                     ("nvdisasm", discovery.find_nvdisasm))}
    monkeypatch.setattr(discovery, "cuda_tool_dirs", lambda: [empty])
    if keep:
        monkeypatch.setenv(env[keep], real[keep])


# (target, what goes missing, the one line after "error: ")
def _missing_ptxas(mp, d):
    _no_cuda(mp, d, keep="nvdisasm")


def _missing_nvdisasm(mp, d):
    _no_cuda(mp, d, keep="ptxas")


def _missing_linker(mp, d):
    mp.setenv("PATH", str(d))
    mp.setenv("ROCM_PATH", str(d))
    mp.setenv(lldlink.LINKER_ENV, "subprocess")


def _missing_native_helper(mp, d):
    mp.setenv(lldlink.LINKER_ENV, "inprocess")
    mp.setattr(native, "native_inputs", lambda lib: (False, "no g++ in PATH", None))


def _missing_libllvm(mp, d):
    mp.setenv(discovery.CODEGEN_ENV, "libllvm")
    mp.setattr(libllvm, "llvm_library_candidates", lambda: [])


MISSING = {
    "ptxas": ("sm_90", _missing_ptxas,
              f"sm_90 cannot be built here: ptxas: no ptxas found "
              f"{WHERE.format('nvidia-cuda-nvcc')}: {NV}, or set $WGRADCACHE_PTXAS"),
    "nvdisasm": ("sm_90", _missing_nvdisasm,
                 f"sm_90 cannot be built here: nvdisasm: no nvdisasm found "
                 f"{WHERE.format('nvidia-cuda-nvdisasm')}: {NV}, or set "
                 "$WGRADCACHE_NVDISASM"),
    "linker": ("gfx1250", _missing_linker,
               "gfx1250 cannot be built here: linker: no LLVM >= 22 linker (ld.lld) found in "
               "$ROCM_PATH/llvm/bin or on PATH: install one with `apt-get install lld-22` "
               "(Debian/Ubuntu) or `make deps`"),
    "native helper": ("gfx1250", _missing_native_helper,
                      "gfx1250 cannot be built here: linker: WGRADCACHE_LINKER=inprocess but "
                      "no g++ in PATH"),
    "libllvm": ("gfx1250", _missing_libllvm,
                "gfx1250 cannot be built here: codegen: WGRADCACHE_CODEGEN=libllvm but no "
                "libLLVM >= 22 loads: install `llvm-22` (`make deps`)"),
}


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


def _commands(target: str, tmp: Path, geo: Path) -> dict[str, list[str]]:
    label = (f"{target}-fp16-t32x32x32-w1x1-v8x8-sync-default-none")
    plan = tmp / "plan.yaml"
    plan.write_text(f"targets: [{target}]\ndtypes: [fp16]\nvariants: [sync.default.none]\n"
                    "verify:\n  level: integrity\n  sample: 1.0\nmax_size: null\n"
                    "job_timeout: 300\n")
    common = ["--geometries", str(geo)]
    return {
        "build": ["build", "--target", target, "--dtype", "fp16", "--variant",
                  "sync.default.none", "--cache-dir", str(tmp / "cache"), *common],
        "refresh": ["refresh", "--plan", str(plan), "--report-dir", str(tmp / "report"),
                    "--cache-dir", str(tmp / "cache"), *common],
        "compile": ["compile", label, "--out", str(tmp / "out"), *common],
        "reproduce": ["verify", "--from-cache", "--target", target, "--level", "reproduce",
                      "--cache-dir", str(tmp / "built"), *common],
    }


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A one-job cache per target, built with every tool present (what reproduce reads)."""
    root = tmp_path_factory.mktemp("preflight")
    geo = small_geometries(root)
    for target in ("gfx1250", "sm_90"):
        r = CliRunner().invoke(main, ["build", "--target", target, "--dtype", "fp16",
                                      "--variant", "sync.default.none", "--cache-dir",
                                      str(root / "built"), "--geometries", str(geo)])
        assert r.exit_code == 0, r.output
    return root, geo


@pytest.mark.parametrize("tool", sorted(MISSING))
@pytest.mark.parametrize("command", ["build", "refresh", "compile", "reproduce"])
def test_a_missing_tool_is_one_line_before_any_job(tool, command, built, empty, monkeypatch,
                                                   tmp_path):
    root, geo = built
    target, make_missing, line = MISSING[tool]
    argv = _commands(target, tmp_path, geo)[command]
    if command == "reproduce":
        argv[argv.index("--cache-dir") + 1] = str(root / "built")
    before = _files(root / "built")
    make_missing(monkeypatch, empty)
    r = CliRunner().invoke(main, argv)
    assert (r.exit_code, r.output) == (2, f"error: {line}\n"), r.output
    # nothing built, no failure record, no report, no compile output, the built cache as it was
    assert _files(tmp_path) == ["empty", "plan.yaml"]
    assert _files(root / "built") == before


def test_every_tool_present_builds_and_reproduces(built, empty, tmp_path):
    root, geo = built
    for target in ("gfx1250", "sm_90"):
        (tmp_path / target).mkdir()
        cmds = _commands(target, tmp_path / target, geo)
        cmds["reproduce"][cmds["reproduce"].index("--cache-dir") + 1] = str(root / "built")
        for name, argv in cmds.items():
            r = CliRunner().invoke(main, argv)
            assert r.exit_code == 0, (target, name, r.output)
        assert any(p.endswith(".json") for p in _files(tmp_path / target / "cache"))
        assert {Path(p).suffix for p in _files(tmp_path / target / "out")} >= {".ll", ".json"}


def test_a_tool_that_does_not_run_is_unusable(empty, monkeypatch, tmp_path):
    fake = tmp_path / "ptxas"
    fake.write_text("#!/bin/sh\necho 'ptxas: cannot open shared object file' >&2\nexit 127\n")
    fake.chmod(0o755)
    monkeypatch.setenv(discovery.PTXAS_ENV, str(fake))
    (check,) = [c for c in preflight.check_target("sm_90") if c.tool == "ptxas"]
    assert check.line() == (f"sm_90 cannot be built here: ptxas: {fake} --version exits 127 "
                            "(ptxas: cannot open shared object file): install it with "
                            "`pip install 'wgradcache[nvidia]'`")


def test_two_missing_tools_are_still_one_line(empty, monkeypatch):
    _no_cuda(monkeypatch, empty)
    with pytest.raises(discovery.ToolchainError) as e:
        preflight.require_tools(["gfx1250", "sm_90"])
    assert str(e.value).endswith("(and 1 more: `wgradcache toolchain` lists them)")
    assert "\n" not in str(e.value) and str(e.value).startswith("sm_90 cannot be built here: "
                                                                "ptxas: no ptxas found")


def test_toolchain_says_per_target_what_is_missing(empty, monkeypatch):
    _no_cuda(monkeypatch, empty, keep="ptxas")
    r = CliRunner().invoke(main, ["toolchain", "--target", "gfx1250", "--target", "sm_90",
                                  "--json"])
    assert r.exit_code == 1
    doc = json.loads(r.output[:r.output.rindex("}") + 1])
    assert doc["targets"]["gfx1250"]["buildable"] is True
    sm90 = doc["targets"]["sm_90"]
    assert sm90["buildable"] is False
    assert [(t["tool"], t["ok"]) for t in sm90["tools"]] == [
        ("codegen", True), ("ptxas", True), ("nvdisasm", False)]
    assert r.output.splitlines()[-1] == "failed: cannot be built here: sm_90"
    r = CliRunner().invoke(main, ["toolchain", "--target", "gfx1250", "--target", "sm_90"])
    rows = {ln.split("│")[1].strip(): ln.split("│")[2].strip()
            for ln in r.output.splitlines() if ln.startswith("│")}
    assert rows["build gfx1250"] == "yes"
    assert rows["build sm_90"].startswith("no: nvdisasm: no nvdisasm found")
    r = CliRunner().invoke(main, ["toolchain", "--target", "gfx1250"])
    assert r.exit_code == 0, r.output
