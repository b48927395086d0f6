"""A third backend, in the test tree: its catalog entry (``toy1151``, gfx1151's capabilities
under another backend) and an object whose "codegen" stores the LLVM IR text as the blob.

Loaded by ``WGRADCACHE_BACKENDS=toy_backend`` (with this folder on ``PYTHONPATH``) in every
process of a build, as an out-of-tree backend is.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import replace

from wgradcache.model.backends import BACKENDS, Backend, add_target, register
from wgradcache.model.targets import get_target

MAGIC = b"; ModuleID"


class Toy(Backend):
    name = "toy"
    blob_suffix = ".toyir"
    blob_magic = MAGIC
    runtime = "none"
    record_fields = BACKENDS["amdgpu"].record_fields  # its blobs are read as CodeObjectInfo

    @property
    def llvm_triple(self) -> str:
        return "toy-unknown-unknown"

    def lower(self, kd, target: str) -> str:
        from wgradcache.kernel.lower_llvm import lower

        return lower(kd, target)

    def compile(self, ir_text: str, target: str, options, listing: str):
        from wgradcache.compile.codegen import CompiledObject

        blob = ir_text.encode()
        return CompiledObject(hsaco=blob, asm="", listing="none",
                              info=self.read_code_object(blob), timings={})

    def toolchain_identity(self):
        from wgradcache.compile.toolchain import ToolchainIdentity

        return ToolchainIdentity(codegen="toy", llvm_version="0",
                                 codegen_digest=hashlib.sha256(b"toy").hexdigest(),
                                 linker_path="", linker_version="", code_object_version=0)

    def read_code_object(self, data: bytes):
        from wgradcache.compile.codeobject import CodeObjectInfo

        if not data.startswith(MAGIC):
            raise ValueError("not a toy blob")
        m = re.search(rb'define \S+ void @"([^"]+)"', data)
        symbol = m.group(1).decode() if m else ""
        return CodeObjectInfo(
            e_flags=0, mach=0, target="toy", code_object_version=0, symbol=symbol,
            has_symbol=bool(m), has_descriptor=bool(m), args=(), vgpr_count=0, agpr_count=0,
            sgpr_count=0, vgpr_spill_count=0, sgpr_spill_count=0, group_segment_fixed_size=0,
            private_segment_fixed_size=0, wavefront_size=32, max_flat_workgroup_size=0,
            kernarg_segment_size=0, text_bytes=len(data))

    def isa_stats(self, listing: str, kind: str = "disassembly") -> dict[str, int]:
        from wgradcache.compile.isa import isa_stats

        return isa_stats(listing)

    def resource_rows(self, co: dict) -> list[tuple[str, object]]:
        return [("IR bytes", co.get("text_bytes", 0))]


register(Toy())
add_target(replace(get_target("gfx1151"), name="toy1151", backend="toy"))
