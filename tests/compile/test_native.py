"""The native helper: its in-process LLD (same bytes and identity as ld.lld-22, errors,
fallbacks) and its disassembly loop (same text as the ctypes loop)."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from wgradcache.compile import disasm, discovery, lldlink, native, toolchain
from wgradcache.compile.codegen import compile_ir
from wgradcache.compile.discovery import ToolchainError, find_linker
from wgradcache.compile.libllvm import system_llvm
from wgradcache.compile.lldlink import LINKER_ENV, LinkError, in_process_lld, select_linker
from wgradcache.compile.samples import GemmSample, gemm_kernel
from wgradcache.compile.toolchain import with_code_object_version
from wgradcache.jobs import walk
from wgradcache.wgrad.emit import emit_ir

CASES = [
    (gemm_kernel("gfx1250", GemmSample(tile_k=64, async_copy=True, atomic=True)), "gfx1250"),
    (gemm_kernel("gfx942", GemmSample(tile_k=32)), "gfx942"),
    (gemm_kernel("gfx1151", GemmSample(dtype="bf16", tile_m=64, tile_n=64, tile_k=32)), "gfx1151"),
]


@pytest.fixture
def fresh_choice():
    """Forget the per-process linker choice before and after a test that changes it."""
    caches = (lldlink._select_linker, lldlink._in_process, lldlink._ld_lld,
              native.native_library, toolchain._toolchain_identity)
    for c in caches:
        c.cache_clear()
    yield
    for c in caches:
        c.cache_clear()


def _object(ir: str, target: str) -> bytes:
    llvm = system_llvm()
    with llvm.module(with_code_object_version(ir)) as mod:
        return llvm.emit_module(mod, target, 3, "", False)


def _ld_lld(obj: bytes) -> bytes:
    return subprocess.run([str(find_linker()), "-shared", "/dev/stdin", "-o", "/dev/stdout"],
                          input=obj, capture_output=True, check=True).stdout


def test_default_is_in_process_with_ld_lld_version(monkeypatch, fresh_choice):
    monkeypatch.delenv(LINKER_ENV, raising=False)
    linker = select_linker()
    assert linker.kind == "inprocess" and linker.note == ""  # make deps installs liblld-22-dev
    assert linker.version == discovery.tool_version(find_linker())
    assert linker.version.startswith("Debian LLD 22.")
    helper = native.native_library()[0]
    assert linker.path == helper.path and helper.path.name == "native.so"
    assert toolchain.toolchain_report()["native_helper"] == str(helper.path)


@pytest.mark.parametrize("ir,target", CASES)
def test_in_process_bytes_equal_ld_lld(ir, target):
    obj = _object(ir, target)
    assert in_process_lld().link(obj) == _ld_lld(obj)


def _walk_sample() -> list:
    """One gfx1250 job per (variant, dtype) of the first six met: sync and async K loops,
    both epilogues, split-K."""
    picked = {}
    for s in walk("gfx1250"):
        picked.setdefault((s.variant, s.dtype), s)
    assert len(picked) >= 6
    return list(picked.values())[:6]


def test_walk_kernels_equal_ld_lld():
    for s in _walk_sample():
        obj = _object(emit_ir(s).ir_text, s.target)
        assert in_process_lld().link(obj) == _ld_lld(obj), s.label()


def test_compile_ir_same_bytes_and_identity_either_linker(monkeypatch, fresh_choice):
    ir, target = CASES[0]
    monkeypatch.setenv(LINKER_ENV, "inprocess")
    ours, ident = compile_ir(ir, target), toolchain.toolchain_identity()
    monkeypatch.setenv(LINKER_ENV, "subprocess")
    theirs, other = compile_ir(ir, target), toolchain.toolchain_identity()
    assert ours.hsaco == theirs.hsaco
    assert ident.linker_path != other.linker_path == str(find_linker())
    assert ident.digest() == other.digest()  # one cache, whichever linker links


def test_link_error_is_lld_message_and_lld_links_again():
    lld = in_process_lld()
    with pytest.raises(LinkError, match="error: <object>:1: unknown directive"):
        lld.link(b"not an ELF object")
    assert lld.broken == ""
    obj = _object(*CASES[1])
    assert lld.link(obj) == _ld_lld(obj)
    assert not list(lld._workdir().iterdir())  # nothing left behind


def test_after_lld_cannot_run_again_an_ld_lld_process_takes_over(monkeypatch, fresh_choice):
    """LLD recovered from a crash and refuses further links: the same bytes come from an
    ld.lld process of the same version; of another version, the error says what to do."""
    lld = in_process_lld()
    obj = _object(*CASES[1])
    monkeypatch.setattr(lld, "broken", "LLD crashed")
    with pytest.raises(ToolchainError, match="cannot link again"):
        lld.link(obj)
    assert lldlink.link_in_process(obj) == _ld_lld(obj)
    monkeypatch.setattr(lldlink, "tool_version", lambda path: "LLD 23.0.0")
    lldlink._ld_lld.cache_clear()  # asked once per process: another process, another ld.lld
    with pytest.raises(ToolchainError, match="is another LLD; set WGRADCACHE_LINKER"):
        lldlink.link_in_process(obj)


def test_choice_from_environment(monkeypatch, fresh_choice):
    monkeypatch.setenv(LINKER_ENV, "subprocess")
    linker = select_linker()
    assert (linker.kind, linker.path) == ("subprocess", find_linker())
    assert linker.note == f"{LINKER_ENV}=subprocess"
    monkeypatch.setenv(LINKER_ENV, "gold")
    with pytest.raises(ToolchainError, match="expected one of auto, inprocess, subprocess"):
        select_linker()


def test_without_a_compiler_falls_back_and_says_why(monkeypatch, tmp_path, fresh_choice):
    """A fresh user cache and no C++ compiler: auto links through ld.lld, the report says
    why; asking for inprocess is an error naming the missing piece."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-c++"))
    monkeypatch.setenv(LINKER_ENV, "auto")
    linker = select_linker()
    assert linker.kind == "subprocess" and "no C++ compiler" in linker.note
    assert toolchain.toolchain_report()["linker_note"] == linker.note
    ir, target = CASES[1]
    obj = _object(ir, target)
    assert compile_ir(ir, target).hsaco == _ld_lld(obj)
    lldlink._select_linker.cache_clear()
    monkeypatch.setenv(LINKER_ENV, "inprocess")
    with pytest.raises(ToolchainError, match="inprocess but no C\\+\\+ compiler"):
        select_linker()


def test_a_failing_compiler_falls_back_with_its_words(monkeypatch, tmp_path, fresh_choice):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("CXX", "false")
    monkeypatch.delenv(LINKER_ENV, raising=False)
    linker = select_linker()
    assert linker.kind == "subprocess"
    assert linker.note.startswith("compiling the native helper failed: ")
    assert linker.note.endswith("false exited with status 1")
    assert not list((tmp_path / "xdg").rglob("*.so"))  # nothing half-made left to load


def test_native_inputs_name_what_is_missing(tmp_path):
    lib = tmp_path / "lib" / "libLLVM.so.22.1"
    lib.parent.mkdir()
    lib.write_bytes(b"")
    ok, why, _ = native.native_inputs(lib)
    assert not ok and "no LLD headers" in why and "liblld-22-dev" in why
    (tmp_path / "include" / "lld" / "Common").mkdir(parents=True)
    (tmp_path / "include" / "lld" / "Common" / "Driver.h").write_text("")
    (lib.parent / "liblldCommon.a").write_bytes(b"")
    ok, why, _ = native.native_inputs(lib)
    assert not ok and why.startswith("no liblldELF.a in")


def test_native_helper_is_built_once_per_key(monkeypatch, tmp_path, fresh_choice):
    """Compiled into the user cache on first use, then found there (no compiler run)."""
    version = in_process_lld().version
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    ok, _, paths = native.native_inputs(system_llvm().path)
    assert ok
    built = native.build_native(paths)
    assert built.is_relative_to(tmp_path / "wgradcache" / "native") and built.stat().st_size
    monkeypatch.setenv("PATH", "")
    paths["cxx"] = tmp_path / "absent"  # a second build would fail
    assert native.build_native(paths) == built
    assert lldlink.InProcessLLD(native.load_native(built)).version == version


@pytest.mark.parametrize("ir,target", CASES)
def test_native_disassembly_is_the_ctypes_text(ir, target):
    obj = _object(ir, target)
    lib, why = native.native_library()
    assert lib is not None, why
    text = disasm._disassemble(obj, target, "", lib)
    assert text == disasm._disassemble(obj, target, "", None)
    assert "\tv_wmma_" in text or "\tv_mfma_" in text


def test_native_disassembly_of_walk_kernels_and_stage2_is_the_ctypes_text():
    from wgradcache.kernel.lower_llvm import lower
    from wgradcache.wgrad.stage2 import build_stage2

    lib = native.native_library()[0]
    irs = [emit_ir(s).ir_text for s in _walk_sample()]
    irs.append(lower(build_stage2("gfx1250", "bf16", 4), "gfx1250"))
    for ir in irs:
        obj = _object(ir, "gfx1250")
        assert disasm._disassemble(obj, "gfx1250", "", lib) == \
            disasm._disassemble(obj, "gfx1250", "", None)


def test_undecodable_bytes_list_as_unknown_either_way():
    """Bytes that are no instruction: ``<unknown>`` per 4 bytes on both paths."""
    from wgradcache.compile.libllvm import system_llvm

    llvm = system_llvm()
    lib = native.native_library()[0]
    code = bytes([0xFF] * 12)
    with llvm.lock:
        dc = llvm.disasm_context("gfx1250", "")
        a = disasm._decode_native(lib, dc, code, 0, len(code))
        b = disasm._decode(llvm, dc, code, 0, len(code))
    assert a == b == [(0, 4, "<unknown>"), (4, 4, "<unknown>"), (8, 4, "<unknown>")]


def _aged(path, days: float) -> None:
    t = time.time() - days * 86400
    os.utime(path, (t, t))


def test_building_a_helper_prunes_the_ones_unused_for_a_month(monkeypatch, tmp_path):
    """Old helpers (another source, another LLVM) go; recently loaded, being-built and
    new directories stay; loading a helper stamps it."""
    from filelock import FileLock

    root = tmp_path / "wgradcache" / "native"
    dirs = {}
    for name, files in {"old": ("native.so", "used", ".lock"), "loaded": ("native.so", "used"),
                        "building": (".lock",), "fresh": ()}.items():
        d = dirs[name] = root / name
        d.mkdir(parents=True)
        for f in files:
            (d / f).write_bytes(b"x")
            _aged(d / f, native.PRUNE_AFTER_DAYS + 5)
        if name != "fresh":
            _aged(d, native.PRUNE_AFTER_DAYS + 5)
    (dirs["loaded"] / "used").touch()  # loaded yesterday, built long ago
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    ok, _, paths = native.native_inputs(system_llvm().path)
    assert ok
    with FileLock(str(dirs["building"] / ".lock")):
        built = native.build_native(paths)
    assert sorted(p.name for p in root.iterdir()) == sorted(
        ["loaded", "building", "fresh", built.parent.name])
    used = built.parent / "used"
    _aged(used, 1)
    native.load_native(built)
    assert time.time() - used.stat().st_mtime < 60
    _aged(dirs["building"], native.PRUNE_AFTER_DAYS + 5)  # now unlocked: it goes
    assert native.prune_native(built.parent, max_age_days=0.5) == [dirs["building"]]
