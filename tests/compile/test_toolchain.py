"""Tool discovery, the toolchain identity and the code-object-version module flag."""

from __future__ import annotations

import dataclasses
import re
import stat

import pytest
from llvmlite import binding

from wgradcache.compile import discovery, libllvm, toolchain
from wgradcache.compile.codegen import TRIPLE, _llvm
from wgradcache.compile.discovery import ToolchainError, find_linker
from wgradcache.compile.libllvm import system_llvm
from wgradcache.compile.lldlink import select_linker
from wgradcache.compile.samples import mma_kernel
from wgradcache.compile.toolchain import toolchain_identity, with_code_object_version
from wgradcache.model.targets import CODE_OBJECT_VERSION


def _fake_tool(path, version_line: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho '{version_line}'\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def bare_env(monkeypatch, tmp_path):
    """No ROCm and a PATH holding only an empty directory we can fill."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    monkeypatch.delenv("ROCM_PATH", raising=False)
    monkeypatch.setenv("PATH", str(bindir))
    return bindir


def test_rocm_linker_comes_first(bare_env, monkeypatch, tmp_path):
    rocm = _fake_tool(tmp_path / "rocm" / "llvm" / "bin" / "ld.lld", "AMD LLD 22.0.0")
    _fake_tool(bare_env / "ld.lld-22", "Debian LLD 22.1.8")
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "rocm"))
    assert find_linker() == rocm


def test_versioned_linker_on_path(bare_env):
    tool = _fake_tool(bare_env / "ld.lld-22", "Debian LLD 22.1.8")
    _fake_tool(bare_env / "ld.lld", "LLD 22.1.0")
    assert find_linker() == tool


def test_plain_linker_needs_version_22(bare_env):
    _fake_tool(bare_env / "ld.lld", "Ubuntu LLD 18.1.3 (compatible with GNU linkers)")
    with pytest.raises(ToolchainError):
        find_linker()
    new = _fake_tool(bare_env / "ld.lld", "LLD 22.1.0 (compatible with GNU linkers)")
    assert find_linker() == new


def test_no_linker_says_how_to_install_in_one_line(bare_env, monkeypatch, tmp_path):
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "no-rocm-here"))
    with pytest.raises(ToolchainError) as err:
        find_linker()
    msg = str(err.value)
    assert "\n" not in msg
    assert "apt-get install lld-22" in msg and "make deps" in msg
    assert isinstance(err.value, RuntimeError)


def test_disassembler_is_optional(bare_env):
    assert discovery.find_disassembler() is None
    _fake_tool(bare_env / "llvm-objdump", "Ubuntu LLVM version 18.1.3")
    assert discovery.find_disassembler() is None
    tool = _fake_tool(bare_env / "llvm-objdump-22", "Debian LLVM version 22.1.8")
    assert discovery.find_disassembler() == tool


def test_real_linker_is_llvm_22():
    assert re.search(r"LLD 22\.", discovery.tool_version(find_linker()))


def test_identity_fields_and_digest(monkeypatch):
    monkeypatch.delenv(discovery.CODEGEN_ENV, raising=False)
    ident = toolchain_identity()
    assert ident is toolchain_identity()  # cached per process
    assert ident.codegen == "libllvm"  # make deps installs llvm-22
    assert ident.llvm_version == system_llvm().version
    assert ident.llvm_version.startswith("22.")
    assert re.fullmatch(r"[0-9a-f]{64}", ident.codegen_digest)
    assert ident.code_object_version == CODE_OBJECT_VERSION == 5
    assert ident.linker_path == str(select_linker().path)
    assert ident.to_dict()["linker_version"] == ident.linker_version
    digest = ident.digest()
    assert re.fullmatch(r"[0-9a-f]{64}", digest)
    # Where the linker lives does not change the key; what it is does.
    assert dataclasses.replace(ident, linker_path="/elsewhere/ld.lld").digest() == digest
    assert dataclasses.replace(ident, linker_version="LLD 23.0.0").digest() != digest
    assert dataclasses.replace(ident, codegen_digest="0" * 64).digest() != digest
    # The other backend is another toolchain: its objects never share keys with these.
    monkeypatch.setenv(discovery.CODEGEN_ENV, "llvmlite")
    other = toolchain_identity()
    assert other.codegen == "llvmlite" and other.digest() != digest
    assert other.llvm_version == ".".join(map(str, binding.llvm_version_info))


def test_codegen_backend_choice(monkeypatch):
    monkeypatch.setenv(discovery.CODEGEN_ENV, "")
    assert toolchain.codegen_backend() == "libllvm"
    monkeypatch.setenv(discovery.CODEGEN_ENV, "llvmlite")
    assert toolchain.codegen_backend() == "llvmlite"
    monkeypatch.setenv(discovery.CODEGEN_ENV, "llc")
    assert toolchain.codegen_backend() == "llc"
    assert toolchain_identity().codegen == "llc"
    assert toolchain_identity().llvm_version.startswith("Debian LLVM version 22.")
    monkeypatch.setenv(discovery.CODEGEN_ENV, "gcc")
    with pytest.raises(ToolchainError, match="expected one of auto, libllvm, llvmlite, llc"):
        toolchain.codegen_backend()
    # No libLLVM: auto falls back to llvmlite; asking for libllvm says how to get it.
    monkeypatch.setattr(libllvm, "system_llvm", lambda: None)
    monkeypatch.setenv(discovery.CODEGEN_ENV, "auto")
    assert toolchain.codegen_backend() == "llvmlite"
    monkeypatch.setenv(discovery.CODEGEN_ENV, "libllvm")
    with pytest.raises(ToolchainError, match="install `llvm-22`"):
        toolchain.codegen_backend()


def _abi_version(ir: str, target: str = "gfx942") -> int:
    """EI_ABIVERSION of LLVM's object for ``ir``: 3 is code object v5, 4 is v6."""
    b = _llvm()
    tm = b.Target.from_triple(TRIPLE).create_target_machine(cpu=target, opt=3)
    return tm.emit_object(b.parse_assembly(ir))[8]


def test_module_flag_selects_code_object_v5():
    ir = mma_kernel("gfx942")
    assert _abi_version(ir) == 4  # LLVM 22's default: v6
    pinned = with_code_object_version(ir)
    assert _abi_version(pinned) == 3
    assert with_code_object_version(pinned) == pinned  # idempotent


def test_module_flag_merges_with_existing_flags():
    ir = mma_kernel("gfx1250") + '!llvm.module.flags = !{!0}\n!0 = !{i32 7, !"foo", i32 1}\n'
    pinned = with_code_object_version(ir)
    text = str(_llvm().parse_assembly(pinned))
    assert "!llvm.module.flags = !{!0, !1}" in text
    assert '!{i32 7, !"foo", i32 1}' in text
    assert '!{i32 1, !"amdhsa_code_object_version", i32 500}' in text
    assert _abi_version(pinned, "gfx1250") == 3


def test_module_flag_conflict_is_an_error():
    v6 = with_code_object_version(mma_kernel("gfx1250"), 6)
    with pytest.raises(ValueError, match="600"):
        with_code_object_version(v6, 5)


def test_an_unusable_libllvm_does_not_hide_a_good_one(monkeypatch, tmp_path):
    """The libLLVM beside a ROCm linker comes first; one that does not load (here: not a
    library; in life, an older ROCm's LLVM) is skipped for Debian's 22."""
    _fake_tool(tmp_path / "rocm" / "llvm" / "bin" / "ld.lld", "AMD LLD 19.0.0")
    bad = tmp_path / "rocm" / "llvm" / "lib" / "libLLVM.so"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"not an ELF")
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "rocm"))
    candidates = discovery.llvm_library_candidates()
    assert candidates[0] == bad and candidates.count(bad) == 1
    assert system_llvm().path in candidates
    lib = libllvm.system_llvm.__wrapped__()  # uncached: this environment's choice
    assert lib is not None and lib.path != bad and lib.version.startswith("22.")
