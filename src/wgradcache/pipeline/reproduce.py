"""One kernel outside the cache: its .ll, .s, .hsaco and a .json of metadata + ISA statistics.

The way to reproduce and inspect any job by its label. The compile runs in an isolated
child, so a kernel that makes LLVM exit comes back as a failure with LLVM's message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from wgradcache.files.capped import Refused
from wgradcache.files.written import Folder, open_out, refusal
from wgradcache.model.spec import KernelSpec, validate

__all__ = ["CompileReport", "OutputRefused", "compile_one"]


class OutputRefused(ValueError):
    """A file of ``--out`` that is a symlink or not a regular file, or cannot be written:
    one line (exit 2); nothing is written through it (``files.written``)."""


@dataclass(frozen=True)
class CompileReport:
    ok: bool
    label: str
    files: dict[str, str]
    error: str
    doc: dict


def compile_one(spec: KernelSpec, out_dir: str | Path, timeout: float = 300.0,
                check: bool = True, geometries_file: str | None = None) -> CompileReport:
    """Emit, compile and write the four files (``OutputRefused`` when one of them is a
    symlink or not a regular file: checked before the compile, and again at each write);
    ``check=False`` skips the validator (to reproduce a kernel the rules refuse).
    ``geometries_file``: the job data whose rules the spec is checked against (None: the
    shipped one)."""
    from wgradcache.cache.store import content_key
    from wgradcache.compile.codegen import CodegenOptions
    from wgradcache.compile.isolate import compile_isolated
    from wgradcache.compile.preflight import require_tools
    from wgradcache.model.backends import backend_of
    from wgradcache.pipeline.build import codegen_context
    from wgradcache.wgrad.abi import record_facts
    from wgradcache.wgrad.emit import emit_ir, generator_digest

    if check:
        from wgradcache.jobs import default_jobdata

        limits = default_jobdata(geometries_file).limits_for(spec.target)
        ok, why = validate(spec, limits=limits)
        if not ok:
            raise ValueError(f"{spec.label()}: {why}")
    # a set-up error before anything is written
    require_tools([spec.target])
    options, toolchain, _ = codegen_context(spec.target)
    label = spec.label()
    names = file_names(spec)
    try:
        out = open_out(out_dir)
        for name in names.values():  # a link at any of them: nothing written
            out.writable(name)
    except Refused as e:
        raise OutputRefused(f"--out {out_dir}: cannot write: {refusal(e)}") from None
    k = emit_ir(spec, check=check)
    files = {"ll": out.join(names["ll"])}
    _put(out, names["ll"], k.ir_text.encode())
    res = compile_isolated(k.ir_text, spec.target, CodegenOptions(), timeout=timeout,
                           listing="assembly")
    doc: dict = {"label": label, "identity_key": spec.identity_key(), "symbol": k.symbol,
                 "content_key": content_key(k.ir_text, k.symbol, spec.target, options,
                                            toolchain),
                 "generator_digest": generator_digest(), "toolchain": toolchain,
                 "codegen_options": options}
    if not res.ok:
        doc["error"] = res.error
        files["json"] = out.join(names["json"])
        _put(out, names["json"], json.dumps(doc, indent=1, sort_keys=True).encode())
        return CompileReport(False, label, files, res.error, doc)
    for kind in ("s", "hsaco", "json"):
        files[kind] = out.join(names[kind])
    _put(out, names["s"], res.obj.asm.encode())
    _put(out, names["hsaco"], res.obj.hsaco)
    doc["code_object"] = res.obj.info.record(record_facts(spec))
    doc["isa"] = backend_of(spec.target).isa_stats(res.obj.asm, res.obj.listing)
    doc["timings"] = dict(res.obj.timings)
    _put(out, names["json"], json.dumps(doc, indent=1, sort_keys=True).encode())
    return CompileReport(True, label, files, "", doc)


def file_names(spec: KernelSpec) -> dict[str, str]:
    """The four files ``compile`` writes, by kind: the LLVM IR (``ll``), the listing
    (``s``: ``.s``, or ``.ptx`` for NVPTX), the code object (``hsaco``: ``.hsaco``, or
    ``.cubin``, the cache's own suffix) and the report (``json``)."""
    from wgradcache.cache.store import blob_suffix
    from wgradcache.model.targets import get_target

    label = spec.label()
    return {"ll": f"{label}.ll", "s": label + get_target(spec.target).asm_suffix,
            "hsaco": label + blob_suffix(spec.target), "json": f"{label}.json"}


def summary_line(spec: KernelSpec, doc: dict) -> str:
    """The compile summary in the vendor's words: VGPRs, SGPRs, LDS and scratch for AMD;
    registers, static and dynamic shared bytes and local (stack) bytes for NVIDIA."""
    from wgradcache.model.backends import backend_of

    co, isa = doc["code_object"], doc["isa"]
    tail = (f"mma {isa['mma']} barriers {isa['barriers']} "
            f"atomics {isa['global_atomics']}")
    return backend_of(spec.target).summary_line(co, tail)


def _put(out: Folder, name: str, data: bytes) -> None:
    try:
        out.put(name, data)
    except Refused as e:
        raise OutputRefused(f"{out.join(name)}: cannot write: {refusal(e)}") from None
