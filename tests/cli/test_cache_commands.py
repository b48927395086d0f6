"""ls, show, explain, compile and emulate from the command line."""

from __future__ import annotations

import json

from click.testing import CliRunner

from wgradcache.cli import main

LABEL = "gfx1250-fp16-t32x32x32-w1x1-v8x8-sync-cshuffle-atomic"


def _run(*args):
    return CliRunner().invoke(main, list(args))


def test_ls_show_explain(small_cache):
    cd = ["--cache-dir", str(small_cache["cache"])]
    rows = json.loads(_run("ls", *cd, "--json").stdout)
    assert len(rows) == 18
    assert len(json.loads(_run("ls", *cd, "--variant", "async.cshuffle.atomic",
                               "--json").stdout)) == 2
    entry = json.loads(_run("show", LABEL, *cd, "--json").stdout)
    assert entry["label"] == LABEL and entry["isa"]["global_atomic_pk_add_f16"] > 0
    by_key = json.loads(_run("show", entry["identity_key"][:10], *cd, "--json").stdout)
    assert by_key == entry
    doc = json.loads(_run("explain", LABEL, *cd, "--json").stdout)
    assert doc["up_to_date"] is True
    assert [r["input"].split(" ")[0] for r in doc["inputs"]] == [
        "ir_sha256", "target", "codegen", "toolchain", "generator"]
    assert all(r["same"] for r in doc["inputs"])


def test_show_prints_a_summary_for_people(small_cache):
    cd = ["--cache-dir", str(small_cache["cache"])]
    entry = json.loads(_run("show", LABEL, *cd, "--json").stdout)
    r = _run("show", LABEL, *cd)
    assert r.exit_code == 0, r.output
    rows = {}
    for line in r.output.splitlines():
        cells = [c.strip() for c in line.strip("│┃ ").split("│")]
        if len(cells) == 2:
            rows[cells[0]] = cells[1]
    co, isa = entry["code_object"], entry["isa"]
    assert rows["label"] == LABEL and rows["variant"] == "sync.cshuffle.atomic"
    assert rows["blob"] == f"gfx1250/blobs/{entry['blob']}.hsaco"
    assert rows["blob bytes"] == str(entry["blob_size"])
    assert rows["vgpr"] == str(co["vgpr_count"]) and rows["mma"] == str(isa["mma"])
    assert rows["LDS bytes"] == str(co["group_segment_fixed_size"])
    assert rows["global atomics"] == str(isa["global_atomics"])
    # the main loop of this one-wave 32x32x32 kernel: 2 + 2 atoms, two 128-bit reads each
    assert (rows["main loop mma"], rows["main loop LDS reads"]) == ("4", "8")
    assert (rows["main loop LDS read bytes"], rows["main loop LDS reads < 128 bit"]) == (
        "128", "0")
    assert rows["main loop exec-mask branches"] == "0"
    assert rows["main loop barriers"] == "0"  # one wave: LLVM drops the s_barrier
    for name, key in (("instructions", "instructions"), ("LDS stores", "ds_stores"),
                      ("global loads", "global_loads"), ("VALU", "valu"), ("SALU", "salu"),
                      ("waits", "waits")):
        assert rows[f"main loop {name}"] == str(isa[f"main_loop_{key}"]), name
    assert "{" not in r.output  # not the raw JSON


def _show_rows(output: str) -> dict[str, str]:
    rows = {}
    for line in output.splitlines():
        cells = [c.strip() for c in line.strip("│┃ ").split("│")]
        if len(cells) == 2:
            rows[cells[0]] = cells[1]
    return rows


def test_show_names_the_transposing_reads_and_their_sources(small_cache):
    """The async kernel reads its K-outer fragments with ds_load_tr16_b128, whose lane map
    has secondary sources only: show says so; so does the v8x8 sync kernel (K-outer where
    both vectors are 8 elements on gfx1250), with the same reads per K tile."""
    cd = ["--cache-dir", str(small_cache["cache"])]
    label = "gfx1250-fp16-t32x32x32-w1x1-c16x16-async-default-none"
    rows = _show_rows(_run("show", label, *cd).output)
    assert rows["main loop transposing LDS reads"] == "8"  # (2 + 2 atoms) x 2 reads
    assert rows["main loop LDS reads"] == "8" and rows["main loop LDS read bytes"] == "128"
    assert rows["transposing read lane map"].startswith("secondary sources only")
    sync = _show_rows(_run("show", LABEL, *cd).output)
    assert sync["main loop transposing LDS reads"] == "8"
    assert sync["transposing read lane map"] == rows["transposing read lane map"]


def test_show_unknown_is_a_one_line_error(small_cache):
    r = _run("show", "gfx1250-fp16-t32x32x32-w1x1-v4x4-sync-default-none", "--cache-dir",
             str(small_cache["cache"]))
    assert r.exit_code == 2
    assert r.output.startswith("error: no entry for gfx1250-fp16-t32x32x32-w1x1-v4x4-sync-")
    assert _run("show", "nonsense-label").exit_code == 2


def test_compile_writes_the_four_files(tmp_path):
    r = _run("compile", "gfx1201-bf16-t64x32x32-w2x1-v8x1-sync-default-none", "--out",
             str(tmp_path), "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    stem = tmp_path / "gfx1201-bf16-t64x32x32-w2x1-v8x1-sync-default-none"
    for ext in ("ll", "s", "hsaco", "json"):
        assert stem.with_suffix(f".{ext}").is_file()
    assert stem.with_suffix(".hsaco").read_bytes()[:4] == b"\x7fELF"
    assert ".amdgpu_metadata" in stem.with_suffix(".s").read_text()
    assert doc["code_object"]["mach"] == 0x4E and doc["isa"]["mma"] > 0


def test_emulate_pass_and_cannot_serve():
    r = _run("emulate", "gfx1151-bf16-t32x32x32-w1x1-v8x1-sync-cshuffle-none", "--problem",
             "2,3,9,9,16,3,3,2,1", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["passed"] is True and doc["error"] <= doc["bound"] <= 1e-2
    r = _run("emulate", "gfx1250-fp16-t32x32x32-w1x1-v8x8-sync-default-none", "--problem",
             "2,3,9,9,16,3,3")
    assert r.exit_code == 2
    assert "vec_b 8 does not divide cpg=3" in r.output


def test_bad_codegen_backend_is_a_one_line_error(monkeypatch, tmp_path):
    """A set-up problem (here $WGRADCACHE_CODEGEN) is one line, exit 2, nothing written."""
    monkeypatch.setenv("WGRADCACHE_CODEGEN", "gcc")
    for args in (["build", "--target", "gfx1250", "--limit", "1",
                  "--cache-dir", str(tmp_path / "cache")],
                 ["compile", LABEL, "--out", str(tmp_path / "out")]):
        r = _run(*args)
        assert r.exit_code == 2, r.output
        assert r.output == ("error: gfx1250 cannot be built here: codegen: "
                            "WGRADCACHE_CODEGEN='gcc': expected one of auto, libllvm, "
                            "llvmlite, llc\n")
    assert not (tmp_path / "cache").exists() and not (tmp_path / "out").exists()


def test_toolchain_names_the_digest_the_cache_was_built_with(small_cache, monkeypatch):
    monkeypatch.delenv("WGRADCACHE_CODEGEN", raising=False)
    doc = json.loads(_run("toolchain", "--json").stdout)
    entry = json.loads(_run("show", LABEL, "--cache-dir", str(small_cache["cache"]),
                            "--json").stdout)
    assert doc["toolchain_digest"] == entry["toolchain_digest"]
    assert (doc["codegen"], doc["disassembler"]) == ("libllvm", "libllvm (native loop)")
    assert (doc["linker"], doc["linker_note"]) == ("inprocess", "")
    assert doc["linker_path"] == doc["native_helper"]
    assert doc["native_helper"].endswith("/native.so")
    assert doc["libllvm"].startswith("/usr/lib/llvm-22/lib/libLLVM")
    monkeypatch.setenv("WGRADCACHE_CODEGEN", "llvmlite")
    other = json.loads(_run("toolchain", "--json").stdout)
    assert other["codegen"] == "llvmlite" and other["codegen_env"] == "llvmlite"
    assert other["toolchain_digest"] != doc["toolchain_digest"]
    assert "codegen_digest" in _run("toolchain").stdout
