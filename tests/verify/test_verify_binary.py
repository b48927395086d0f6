"""verify checks the stored binary, not what its entry says: structure derives symbol,
arguments, registers, LDS and ISA statistics from the blob's bytes and compares them with
the spec and the entry; reproduce compiles each job again and requires the blob byte for
byte. Each test plants one lie in a copy of the small cache and asserts the exact line."""

from __future__ import annotations

import dataclasses
import json
import shutil
import struct

import pytest
from click.testing import CliRunner
from elftools.elf.elffile import ELFFile

from tests.hostile.conftest import tree
from wgradcache.cache.store import TargetCache, sha256_bytes
from wgradcache.cli import main
from wgradcache.compile.codegen import CodegenOptions
from wgradcache.compile.isolate import compile_isolated
from wgradcache.model.spec import KernelSpec
from wgradcache.pipeline.verify import LEVELS, VerifyRequest, verify
from wgradcache.pipeline.verify_reproduce import StoredKernel, reproduce_all
from wgradcache.wgrad.emit import emit_ir

FP16 = "gfx1250-fp16-t32x32x32-w1x1-v8x8-sync-default-none"
BF16 = "gfx1250-bf16-t32x32x32-w1x1-v8x8-sync-default-none"
NOT_REPRODUCIBLE = ("built with another toolchain or other codegen options than this "
                    "machine's: its compile cannot be reproduced here (`wgradcache build` "
                    "rebuilds it)")


def _copy(small_cache, tmp_path) -> tuple[TargetCache, str]:
    dst = tmp_path / "cache"
    shutil.copytree(small_cache["cache"], dst)
    return TargetCache(dst, "gfx1250"), str(small_cache["geometries"])


def _by_label(cache: TargetCache) -> dict:
    return {e.label: e for _, e in cache.iter_entries()}


def _failures(cache: TargetCache, geo: str, level: str) -> list[tuple[str, str, str]]:
    rep = verify(VerifyRequest(cache_dir=str(cache.root), level=level, device="emulator",
                               geometries_file=geo))
    return [(f.label, f.level, f.reason) for f in rep.failures]


def _differences(entry, other) -> list[str]:
    """What structure must say of ``entry``'s record against ``other``'s binary: the two
    kernels' own records differ in exactly these fields."""
    out = [f"symbol: entry records {entry.symbol!r}, the binary {other.symbol!r}"]
    for name in sorted(entry.code_object):
        a, b = entry.code_object[name], other.code_object[name]
        if a != b:
            out.append(f"code_object.{name}: entry records {a!r}, the binary {b!r}"
                       if isinstance(a, str) else
                       f"code_object.{name}: entry records {a}, the binary {b}")
    for name in sorted(entry.isa):
        if entry.isa[name] != other.isa[name]:
            out.append(f"isa.{name}: entry records {entry.isa[name]}, the binary "
                       f"{other.isa[name]}")
    return out if len(out) <= 3 else [*out[:3], f"{len(out) - 3} more recorded field(s) differ"]


def _swapped_line(entry, other) -> str:
    return "; ".join([f"kernel symbol {other.symbol} is {other.label}'s, a kernel whose IR "
                      "is not this one's", *_differences(entry, other)])


def test_the_cli_levels_are_the_librarys():
    level = next(p for p in main.commands["verify"].params if p.name == "level")
    assert tuple(level.type.choices) == LEVELS == ("integrity", "structure", "reproduce",
                                                   "numerics")


def test_an_honest_cache_passes_reproduce_and_is_left_as_it_was(small_cache):
    before = tree(small_cache["cache"])
    r = CliRunner().invoke(main, ["verify", "--from-cache", "--level", "reproduce",
                                  "--cache-dir", str(small_cache["cache"]), "--geometries",
                                  str(small_cache["geometries"]), "--json"])
    doc = json.loads(r.stdout)
    assert (r.exit_code, doc["ok"], doc["checked"], doc["failed"]) == (0, True, 20, 0), r.output
    rep = verify(VerifyRequest(cache_dir=str(small_cache["cache"]), level="reproduce",
                               geometries_file=str(small_cache["geometries"])))
    levels = [level for _, _, level in rep.passed_cases]
    # 18 entries and the two stage-2 kernels, each at every level
    assert [levels.count(x) for x in ("integrity", "structure", "reproduce")] == [20, 20, 20]
    assert tree(small_cache["cache"]) == before


def test_a_blob_swapped_for_another_kernels_bytes_fails_structure_and_reproduce(
        small_cache, tmp_path):
    """The fp16 blob's file holds the bf16 kernel's bytes and the entry records their size
    and sha256: integrity passes; structure reads the other kernel's name and figures."""
    cache, geo = _copy(small_cache, tmp_path)
    entries = _by_label(cache)
    e, other = entries[FP16], entries[BF16]
    honest = cache.read_blob(e.blob)
    data = cache.read_blob(other.blob)
    cache.blob_path(e.blob).write_bytes(data)
    cache.write_entry(dataclasses.replace(e, blob_size=len(data),
                                          blob_sha256=sha256_bytes(data)))
    assert _failures(cache, geo, "integrity") == []
    assert _failures(cache, geo, "reproduce") == [(FP16, "structure", _swapped_line(e, other))]
    # reproduce on its own: the compile of its IR is the honest blob, not these bytes
    spec = KernelSpec.from_dict(e.identity)
    first = next(i for i, (a, b) in enumerate(zip(honest, data, strict=False)) if a != b)
    stored = StoredKernel(e.identity_key, spec, e.symbol, e.blob, data, e.toolchain_digest,
                          e.codegen_options)
    assert reproduce_all("gfx1250", [stored], jobs_n=1) == {
        e.identity_key: f"the compile of its IR is not the stored blob: {len(honest)} bytes "
                        f"against {len(data)} stored, first difference at byte {first}"}
    r = CliRunner().invoke(main, ["verify", "--from-cache", "--cache-dir", str(cache.root),
                                  "--geometries", geo])
    assert r.exit_code == 1
    assert r.stderr.splitlines()[0] == f"FAIL [structure] {FP16}: {_swapped_line(e, other)}"


def test_an_entry_repointed_at_another_valid_blob_fails_structure(small_cache, tmp_path):
    """The entry names the bf16 kernel's blob, with its true size and sha256."""
    cache, geo = _copy(small_cache, tmp_path)
    entries = _by_label(cache)
    e, other = entries[FP16], entries[BF16]
    cache.blob_path(e.blob).unlink()  # else it would be an orphan
    cache.write_entry(dataclasses.replace(e, blob=other.blob, blob_size=other.blob_size,
                                          blob_sha256=other.blob_sha256))
    assert _failures(cache, geo, "integrity") == []
    assert _failures(cache, geo, "structure") == [(FP16, "structure", _swapped_line(e, other))]


def test_a_disguised_blob_passes_structure_and_fails_reproduce(small_cache, tmp_path):
    """The bf16 kernel compiled under the fp16 kernel's name, its figures written into the
    entry: every structure check holds (same variant, LDS, arguments); only compiling the
    entry's own IR shows the bytes are not its compile."""
    cache, geo = _copy(small_cache, tmp_path)
    e = _by_label(cache)[FP16]
    bf16 = emit_ir(KernelSpec.from_dict(_by_label(cache)[BF16].identity))
    out = compile_isolated(bf16.ir_text.replace(bf16.symbol, e.symbol), "gfx1250",
                           CodegenOptions(), timeout=120)
    assert out.ok, out.error
    from wgradcache.pipeline.workers import metadata

    meta, data = metadata(out.obj, "gfx1250", KernelSpec.from_dict(e.identity)), out.obj.hsaco
    honest = cache.read_blob(e.blob)
    cache.write_blob(e.blob, data, meta)
    cache.write_entry(dataclasses.replace(e, blob_size=len(data), blob_sha256=sha256_bytes(data),
                                          code_object=meta.code_object, isa=meta.isa))
    assert _failures(cache, geo, "structure") == []
    first = next(i for i, (a, b) in enumerate(zip(honest, data, strict=False)) if a != b)
    assert _failures(cache, geo, "reproduce") == [
        (FP16, "reproduce", f"the compile of its IR is not the stored blob: {len(honest)} "
                            f"bytes against {len(data)} stored, first difference at byte "
                            f"{first}")]


def test_recorded_figures_that_are_not_the_binarys_fail_naming_each_field(small_cache,
                                                                           tmp_path):
    cache, geo = _copy(small_cache, tmp_path)
    e = _by_label(cache)[FP16]
    co = {**e.code_object, "vgpr_count": e.code_object["vgpr_count"] + 1}
    isa = {**e.isa, "mma": e.isa["mma"] + 1, "zz_bogus": 3}
    cache.write_entry(dataclasses.replace(e, code_object=co, isa=isa))
    assert _failures(cache, geo, "structure") == [(FP16, "structure", "; ".join([
        f"code_object.vgpr_count: entry records {co['vgpr_count']}, the binary "
        f"{e.code_object['vgpr_count']}",
        f"isa.mma: entry records {isa['mma']}, the binary {e.isa['mma']}",
        "isa.zz_bogus: entry records 3, the binary has none"]))]


def test_fields_that_are_not_what_the_identity_says_fail_integrity(small_cache, tmp_path):
    cache, geo = _copy(small_cache, tmp_path)
    e = _by_label(cache)[FP16]
    cache.write_entry(dataclasses.replace(e, label=BF16, block_size=e.block_size * 2))
    assert _failures(cache, geo, "integrity") == [
        (BF16, "integrity", "label, block_size not what its identity says")]


def _dynsym_size(data: bytes, name: str, size: int) -> bytes:
    """``data`` with the ``st_size`` of ``name`` in ``.dynsym`` set to ``size``."""
    import io

    elf = ELFFile(io.BytesIO(data))
    sec = elf.get_section_by_name(".dynsym")
    index = next(i for i, s in enumerate(sec.iter_symbols()) if s.name == name)
    at = sec["sh_offset"] + index * sec["sh_entsize"] + 16  # Elf64_Sym.st_size
    return data[:at] + struct.pack("<Q", size) + data[at + 8:]


def test_a_symbol_past_the_code_is_refused_before_the_disassembler_reads(small_cache,
                                                                         tmp_path):
    """A FUNC symbol whose range runs past ``.text``: the decoder would read past the
    buffer; structure refuses the bytes in one line instead."""
    cache, geo = _copy(small_cache, tmp_path)
    e = _by_label(cache)[FP16]
    data = _dynsym_size(cache.read_blob(e.blob), e.symbol, 1 << 40)
    cache.blob_path(e.blob).write_bytes(data)
    cache.write_entry(dataclasses.replace(e, blob_sha256=sha256_bytes(data)))
    text = e.code_object["text_bytes"]
    [(label, level, reason)] = _failures(cache, geo, "structure")
    assert (label, level) == (FP16, "structure")
    assert reason.startswith(f"not a code object: function '{e.symbol}' at .text+")
    assert reason.endswith(f" ({1 << 40} bytes) is outside .text ({text} bytes)")


def test_a_stage2_blob_swapped_for_the_other_fails_structure(small_cache, tmp_path):
    cache, geo = _copy(small_cache, tmp_path)
    s2 = cache.stage2_entries()
    fp, bf = s2["fp16-wsr8"], s2["bf16-wsr8"]
    data = cache.read_blob(bf.blob)
    cache.blob_path(fp.blob).write_bytes(data)
    cache.write_stage2(dataclasses.replace(fp, blob_size=len(data),
                                           blob_sha256=sha256_bytes(data)))
    [(label, level, reason)] = _failures(cache, geo, "structure")
    assert (label, level) == ("stage2 fp16-wsr8", "structure")
    assert reason.startswith("kernel symbol 'wgrad_stage2_bf16_wsr8' is not this kernel's "
                             "(wgrad_stage2_fp16_wsr8); symbol: entry records "
                             "'wgrad_stage2_fp16_wsr8', the binary 'wgrad_stage2_bf16_wsr8'")


def test_an_entry_of_another_toolchain_is_not_reproducible_here(small_cache, tmp_path):
    cache, geo = _copy(small_cache, tmp_path)
    e = _by_label(cache)[FP16]
    cache.write_entry(dataclasses.replace(e, toolchain_digest="0" * 16))
    assert _failures(cache, geo, "reproduce") == [(FP16, "reproduce", NOT_REPRODUCIBLE)]


def test_without_a_disassembler_structure_is_not_taken_on_the_entries_word(small_cache,
                                                                          monkeypatch):
    monkeypatch.setattr("wgradcache.compile.disasm.disassembler_available", lambda: False)
    monkeypatch.setattr("wgradcache.compile.discovery.find_disassembler", lambda: None)
    cache = TargetCache(small_cache["cache"], "gfx1250")
    assert _failures(cache, str(small_cache["geometries"]), "structure") == [
        ("gfx1250", "structure", "no libLLVM >= 22 nor llvm-objdump >= 22 here: the ISA "
                                 "statistics of the stored binaries cannot be derived "
                                 "(install `llvm-22`)")]


def test_llvm_objdump_gives_structure_the_same_figures(small_cache, monkeypatch):
    """The build's fallback listing: the same verdict on every entry (the figures compared
    with each entry's record are equal field for field, or it would fail)."""
    from wgradcache.compile.discovery import find_disassembler

    if find_disassembler() is None:
        pytest.skip("no llvm-objdump-22 here: the fallback cannot run")
    monkeypatch.setattr("wgradcache.compile.disasm.disassembler_available", lambda: False)
    cache = TargetCache(small_cache["cache"], "gfx1250")
    assert _failures(cache, str(small_cache["geometries"]), "structure") == []


@pytest.mark.parametrize(("how", "start"), [
    ("truncated", "not a code object: malformed"),
    ("not-elf", "not a code object: not an ELF file (no \\x7fELF magic): not a code object"),
    ("empty", "not a code object: not an ELF file"),
])
def test_a_blob_that_is_no_code_object_is_one_structure_line(small_cache, tmp_path, how,
                                                              start):
    """Bytes whose size and sha256 the entry records but that are no code object (cut in
    half, text, nothing): one structure line, no traceback, nothing disassembled."""
    cache, geo = _copy(small_cache, tmp_path)
    e = _by_label(cache)[FP16]
    honest = cache.read_blob(e.blob)
    data = {"truncated": honest[:len(honest) // 2], "not-elf": b"#!/bin/sh\nrm -rf /\n",
            "empty": b""}[how]
    cache.blob_path(e.blob).write_bytes(data)
    cache.write_entry(dataclasses.replace(e, blob_size=len(data),
                                          blob_sha256=sha256_bytes(data)))
    [(label, level, reason)] = _failures(cache, geo, "structure")
    assert (label, level) == (FP16, "structure") and reason.startswith(start), reason
    assert "\n" not in reason
