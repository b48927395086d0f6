"""AMD records did not change when sm_90's learned NVIDIA's words: an entry and a sidecar
written before (``data/gfx1250-before``, a build of the version before) read and write the
same bytes, and the same kernel compiled today has the sidecar it had, less the ISA figures
added since (``ADDED_ISA``: the async ring's wait depth, 0 for this sync kernel)."""

from __future__ import annotations

import json
from pathlib import Path

from wgradcache.cache.entry import BlobMeta, Entry, read_record, record_bytes

DATA = Path(__file__).parent / "data" / "gfx1250-before"
ADDED_ISA = {"main_loop_async_wait_depth": 0}


def test_an_amd_entry_and_sidecar_written_before_are_the_same_bytes_read_and_written():
    for cls, name in ((Entry, "entry.json"), (BlobMeta, "sidecar.json")):
        raw = (DATA / name).read_bytes()
        assert record_bytes(read_record(cls, raw, name, "gfx1250")) == raw


def test_an_amd_kernel_compiled_today_has_the_record_it_had():
    from wgradcache.compile.codegen import CodegenOptions, compile_ir
    from wgradcache.model.spec import KernelSpec
    from wgradcache.pipeline.workers import metadata
    from wgradcache.wgrad.emit import emit_ir

    entry = read_record(Entry, (DATA / "entry.json").read_bytes(), "entry.json")
    spec = KernelSpec.from_dict(entry.identity)
    obj = compile_ir(emit_ir(spec).ir_text, spec.target, CodegenOptions())
    meta = metadata(obj, spec.target, spec)
    before = json.loads((DATA / "sidecar.json").read_bytes())
    assert json.loads(record_bytes(meta)) == {**before, "isa": {**before["isa"], **ADDED_ISA}}
    assert meta.code_object == entry.code_object and meta.isa == {**entry.isa, **ADDED_ISA}
