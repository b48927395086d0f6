"""Schema-valid cache records for tests that need no compiler: keys are 64 hex digits, the
identity is a real spec's canonical form, the code object has every field the reader
checks."""

from __future__ import annotations

import hashlib

from wgradcache.cache.entry import CODE_OBJECT_FIELDS, Entry
from wgradcache.model.spec import KernelSpec

SPEC = KernelSpec(target="gfx1250", dtype="fp16", dw_dtype="fp16", tile_m=32, tile_n=32,
                  tile_k=32, warp_m=1, warp_n=1, vec_a=8, vec_b=8)
_ZERO = {int: 0, str: "", bool: False, list: []}
CODE_OBJECT = {**{k: _ZERO[t] for k, t in CODE_OBJECT_FIELDS.items()}, "vgpr_count": 40,
               "args": [{"name": "dy_ptr", "offset": 0, "size": 8,
                         "value_kind": "global_buffer"}]}


def key(name: str) -> str:
    """A key (64 hex digits) named by a short string, so tests read as before."""
    return hashlib.sha256(name.encode()).hexdigest()


def entry(ik: str = "ab" * 32, **kw) -> Entry:
    base = dict(identity_key=ik, identity=SPEC.canonical(), label="x", target="gfx1250",
                variant="sync.default.none", dtype="fp16", blob=key("k1"), blob_size=64,
                blob_sha256="0" * 64, symbol="wgrad_x", emitted_symbol="wgrad_x",
                ir_sha256="1" * 64, block_size=64, code_object=CODE_OBJECT,
                isa={"mma": 8}, generator_digest="g", toolchain={"llvm_version": "22"},
                toolchain_digest="t", codegen_options={"opt_level": 3}, published=1.5)
    return Entry(**{**base, **kw})
