"""``wgradcache explain``: every input of an entry's content key, as stored and as this
machine would compute it now (the IR the generator emits today, the codegen options, the
toolchain, the generator digest), so a user sees why an entry is, or is not, up to date.

Why here and not in ``cache/``: the "now" side runs the generator and asks the pipeline for
its codegen context; the cache layer only reads and writes what is stored."""

from __future__ import annotations

from pathlib import Path

from wgradcache.cache.catalog import find_entry

__all__ = ["explain"]


def explain(root: str | Path, key_or_label: str) -> dict:
    """Every input of the entry's content key, stored vs now: a changed toolchain, option,
    generator or IR shows up as the one row that differs ("why was this rebuilt")."""
    from wgradcache.cache.store import blank_symbol, content_key, sha256_bytes
    from wgradcache.compile.toolchain import keyed_fields
    from wgradcache.model.spec import KernelSpec
    from wgradcache.pipeline.build import codegen_context
    from wgradcache.wgrad.emit import emit_ir, generator_digest

    found = find_entry(root, key_or_label)
    e = found.record
    spec = KernelSpec.from_dict(e.identity)
    options, toolchain, tdigest = codegen_context(spec.target)
    k = emit_ir(spec)
    ir_now = sha256_bytes(blank_symbol(k.ir_text, k.symbol).encode())
    ckey_now = content_key(k.ir_text, k.symbol, spec.target, options, toolchain)
    rows = [
        ("ir_sha256 (symbol blanked)", e.ir_sha256, ir_now),
        ("target", e.target, spec.target),
        ("codegen options", e.codegen_options, options),
        ("toolchain (where the linker lives is not in the key)",
         keyed_fields(e.toolchain), keyed_fields(toolchain)),
        ("generator digest (not in the key; decides up-to-date)",
         e.generator_digest, generator_digest()),
    ]
    return {
        "identity_key": found.identity_key, "label": e.label,
        "content_key": e.blob, "content_key_now": ckey_now,
        "up_to_date": e.blob == ckey_now,
        "inputs": [{"input": name, "stored": a, "now": b, "same": a == b}
                   for name, a, b in rows],
    }

