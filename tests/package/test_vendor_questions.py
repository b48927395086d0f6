"""Only the catalog and the backends know a vendor: no other module asks which vendor a
target is, by a flag or by the shape of its name, nor which vendor a blob or a listing is,
by its content: a stage asks the target's backend for the reader."""

from __future__ import annotations

import re

from test_import_cycles import PACKAGE, import_edges

_ASKS = re.compile(r"is_nvidia|startswith\(\"(gfx|sm_)|== \"(sm_|gfx)\d")
_KNOWS = {"model/targets.py", "model/backends.py"}


def test_no_module_outside_the_catalog_and_backends_asks_the_vendor():
    asking = [f"{p.relative_to(PACKAGE)}:{i}" for p in sorted(PACKAGE.rglob("*.py"))
              if str(p.relative_to(PACKAGE)) not in _KNOWS
              and p.relative_to(PACKAGE).parts[0] != "backend"
              for i, line in enumerate(p.read_text().splitlines(), 1) if _ASKS.search(line)]
    assert asking == []


def test_the_pattern_finds_a_vendor_question():
    assert _ASKS.search('if get_target(t).is_nvidia:')
    assert _ASKS.search('return NV if cpu.startswith("sm_") else AMD')
    assert not _ASKS.search('backend_of(t).blob_suffix')


# What tells an NVIDIA blob or listing by its bytes: the cubin's e_machine test, nvdisasm's
# and the PTX's heads, the code object's target string. Only NVIDIA's own reader may.
_SNIFFS = re.compile(r"is_cubin\(|is_sass\(|_is_ptx\(|\.target sm_|/\*0000\*/|"
                     r"startswith\(\"(nvptx|amdgcn)")
_NV_READER = "compile/cubin.py"
# the vendors' readers of code objects and listings, which the backends' objects call
_READERS = {"wgradcache.compile.codeobject", "wgradcache.compile.cubin",
            "wgradcache.compile.isa"}


def test_no_reader_tells_vendors_apart_by_content():
    sniffing = [f"{p.relative_to(PACKAGE)}:{i}" for p in sorted(PACKAGE.rglob("*.py"))
                if str(p.relative_to(PACKAGE)) != _NV_READER
                for i, line in enumerate(p.read_text().splitlines(), 1)
                if _SNIFFS.search(line.split("#")[0])]
    assert sniffing == []


def test_an_amd_reader_never_hands_a_blob_to_nvidias():
    edges = import_edges(PACKAGE)
    for amd in ("wgradcache.compile.codeobject", "wgradcache.compile.isa"):
        assert "wgradcache.compile.cubin" not in edges[amd], amd


def test_stages_read_code_objects_through_the_backend():
    """Outside compile/ (the readers and the codegens that call them) and backend/, no
    module imports a reader: it asks ``backend_of(target)``."""
    edges = import_edges(PACKAGE)
    direct = sorted(f"{m} -> {r}" for m, rs in edges.items() for r in rs & _READERS
                    if m.split(".")[1] not in ("compile", "backend"))
    assert direct == []


def test_the_content_pattern_finds_a_sniff():
    assert _SNIFFS.search('if isinstance(b, bytes) and is_cubin(b):')
    assert _SNIFFS.search('want = a if co.target.startswith("nvptx") else b')
    assert _SNIFFS.search('    return ".target sm_" in head and ".address_size" in head')
    assert not _SNIFFS.search("co = backend_of(target).read_code_object(data)")
