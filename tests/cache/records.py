"""Schema-valid cache records for tests that need no compiler: keys are 64 hex digits, the
identity is a real spec's canonical form and an entry's key its hash, the code object has
every field the reader checks."""

from __future__ import annotations

import hashlib
from dataclasses import replace

from wgradcache.cache.entry import Entry
from wgradcache.model.backends import backend_of
from wgradcache.model.spec import KernelSpec, identity_key_of

SPEC = KernelSpec(target="gfx1250", dtype="fp16", dw_dtype="fp16", tile_m=32, tile_n=32,
                  tile_k=32, warp_m=1, warp_n=1, vec_a=8, vec_b=8)
_ZERO = {int: 0, str: "", bool: False, list: []}
CODE_OBJECT = {**{k: _ZERO[t] for k, t in backend_of(SPEC.target).record_fields.items()},
               "vgpr_count": 40,
               "args": [{"name": "dy_ptr", "offset": 0, "size": 8,
                         "value_kind": "global_buffer"}]}


def key(name: str) -> str:
    """A key (64 hex digits) named by a short string, so tests read as before."""
    return hashlib.sha256(name.encode()).hexdigest()


def spec_named(name: str = "") -> KernelSpec:
    """A spec of its own per name (only ws_replicas differs; "" is ``SPEC``): the entry
    reader wants an identity that hashes to its key, so distinct entries need distinct
    identities."""
    return replace(SPEC, ws_replicas=int(key(name)[:6], 16)) if name else SPEC


def ik(name: str = "") -> str:
    """The identity key of ``entry(name)``."""
    return spec_named(name).identity_key()


def entry(name: str = "", **kw) -> Entry:
    identity = kw.pop("identity", spec_named(name).canonical())
    base = dict(identity_key=identity_key_of(identity), identity=identity, label="x",
                target="gfx1250",
                variant="sync.default.none", dtype="fp16", blob=key("k1"), blob_size=64,
                blob_sha256="0" * 64, symbol="wgrad_x", emitted_symbol="wgrad_x",
                ir_sha256="1" * 64, block_size=64, code_object=CODE_OBJECT,
                isa={"mma": 8}, generator_digest="g", toolchain={"llvm_version": "22"},
                toolchain_digest="t", codegen_options={"opt_level": 3}, published=1.5)
    return Entry(**{**base, **kw})
