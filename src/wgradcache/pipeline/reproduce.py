"""One kernel outside the cache: its .ll, .s, .hsaco and a .json of metadata + ISA statistics.

The way to reproduce and inspect any job by its label. The compile runs in an isolated
child, so a kernel that makes LLVM exit comes back as a failure with LLVM's message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from wgradcache.model.spec import KernelSpec, validate

__all__ = ["CompileReport", "compile_one"]


@dataclass(frozen=True)
class CompileReport:
    ok: bool
    label: str
    files: dict[str, str]
    error: str
    doc: dict


def compile_one(spec: KernelSpec, out_dir: str | Path, timeout: float = 300.0,
                check: bool = True, geometries_file: str | None = None) -> CompileReport:
    """Emit, compile and write the four files; ``check=False`` skips the validator (to
    reproduce a kernel the rules refuse). ``geometries_file``: the job data whose rules
    the spec is checked against (None: the shipped one)."""
    from wgradcache.cache.store import content_key
    from wgradcache.compile.codegen import CodegenOptions
    from wgradcache.compile.isa import isa_stats
    from wgradcache.compile.isolate import compile_isolated
    from wgradcache.compile.preflight import require_tools
    from wgradcache.pipeline.build import codegen_context
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
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    label = spec.label()
    k = emit_ir(spec, check=check)
    files = {"ll": str(out / f"{label}.ll")}
    Path(files["ll"]).write_text(k.ir_text)
    res = compile_isolated(k.ir_text, spec.target, CodegenOptions(), timeout=timeout,
                           listing="assembly")
    doc: dict = {"label": label, "identity_key": spec.identity_key(), "symbol": k.symbol,
                 "content_key": content_key(k.ir_text, k.symbol, spec.target, options,
                                            toolchain),
                 "generator_digest": generator_digest(), "toolchain": toolchain,
                 "codegen_options": options}
    if not res.ok:
        doc["error"] = res.error
        files["json"] = str(out / f"{label}.json")
        Path(files["json"]).write_text(json.dumps(doc, indent=1, sort_keys=True))
        return CompileReport(False, label, files, res.error, doc)
    files["s"] = str(out / f"{label}.s")
    files["hsaco"] = str(out / f"{label}.hsaco")
    files["json"] = str(out / f"{label}.json")
    Path(files["s"]).write_text(res.obj.asm)
    Path(files["hsaco"]).write_bytes(res.obj.hsaco)
    doc["code_object"] = res.obj.info.to_dict()
    doc["isa"] = isa_stats(res.obj.asm)
    doc["timings"] = dict(res.obj.timings)
    Path(files["json"]).write_text(json.dumps(doc, indent=1, sort_keys=True))
    return CompileReport(True, label, files, "", doc)
