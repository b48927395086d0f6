"""The backend registry: one object per vendor answers every question whose answer depends
on the vendor (after Triton's ``make_backend``); nothing else asks which vendor a target is.

The catalog names each target's backend (``Target.backend``); ``backend_of(target)`` is the
object. The objects live in ``backend/`` (``amdgpu.py``, ``nvptx.py``), below every stage
they call (lowering, codegen, the code-object readers, the runtimes), and register when the
package loads (``wgradcache/__init__``): a stage above them calls one through this registry
and never imports it. A module named in ``WGRADCACHE_BACKENDS`` (comma-separated) is
imported then too and may register a backend and its catalog entries (``add_target``): how
a backend outside the tree (the tests' toy) reaches the build's worker processes, which
inherit the environment.
"""

from __future__ import annotations

from wgradcache.model.targets import TARGETS, Target, get_target

__all__ = ["Backend", "BACKENDS", "add_target", "backend_of", "register"]


class Backend:
    """What a vendor's backend answers. Data first, then the calls; each call is its own
    lowering, codegen and readers (imported inside, from the stages below the registry)."""

    name: str
    blob_suffix: str  # the stored code object's suffix; six characters (cache/store.py)
    blob_magic: bytes  # what a code object of this backend starts with
    runtime: str  # the device API its code objects load through ("hip", "cuda")
    # a toolchain of its own (not the AMD targets' LLVM + LLD): its own identity and digest
    own_toolchain: bool = True
    tools: tuple[str, ...] = ()  # what a build needs (compile.preflight's checks, by name)
    names_kernel_args: bool = True  # the code object lists its arguments by ABI name
    # The fields of its code-object record (an entry's, a sidecar's ``code_object``), in the
    # vendor's words, with their JSON types; ``list`` is the kernel arguments
    # (``cache/entry.KERNEL_ARG_FIELDS`` each). What ``read_code_object``'s ``record`` writes.
    record_fields: dict[str, type]
    # The fields its targets' records had in an older version, read and upgraded
    # (``upgrade_record``); None: there was no other.
    legacy_record_fields: dict[str, type] | None = None
    # LLVM drops the barrier of a block of one wave (AMDGPU); ptxas keeps bar.sync
    one_wave_barrier: bool = False

    @property
    def llvm_triple(self) -> str:
        """The triple LLVM's codegen runs for (its lowering's)."""
        raise NotImplementedError

    def lower(self, kd, target: str) -> str:
        """LLVM IR text of ``kd`` for ``target``; deterministic."""
        raise NotImplementedError

    def compile(self, ir_text: str, target: str, options, listing: str):
        """``compile.codegen.compile_ir`` for this backend: a ``CompiledObject``."""
        raise NotImplementedError

    def toolchain_identity(self):
        """The ``ToolchainIdentity`` of this process (only with ``own_toolchain``)."""
        raise NotImplementedError

    def read_code_object(self, data: bytes):
        """What a stored blob says of its kernel (``compile.codeobject.CodeObjectInfo`` or
        ``compile.cubin.CubinInfo``: the same questions, each in its vendor's fields, and
        ``record(facts)``, its record with a ``wgrad.abi.RecordFacts``); ValueError for
        bytes that are not one of this backend's code objects."""
        raise NotImplementedError

    def upgrade_record(self, old: dict, facts) -> dict:
        """The record of ``legacy_record_fields``'s form ``old`` in this version's, with the
        kernel's ``RecordFacts`` (names () when not known: the old names stay)."""
        raise NotImplementedError

    def isa_stats(self, listing: str, kind: str = "disassembly") -> dict[str, int]:
        """The ISA statistics of a listing of ``kind`` (``CompiledObject.listing``: a stored
        blob's is "disassembly")."""
        raise NotImplementedError

    def stored_listing(self, data: bytes, target: str) -> str:
        """The listing ``isa_stats`` reads, of a stored blob (verify's structure level)."""
        raise NotImplementedError

    def disassembler_missing(self) -> str:
        """Why no stored blob can be listed here, or "" when one can."""
        return f"the {self.name} backend lists no stored binary: no ISA statistics to check"

    def prefetch_listings(self, blobs: list[bytes]) -> None:
        """Start listing many blobs at once where one listing is a process (nvdisasm)."""

    def summary_line(self, co: dict, tail: str) -> str:
        """``compile``'s summary of a code object record in the vendor's words."""
        raise NotImplementedError

    def resource_rows(self, co: dict) -> list[tuple[str, object]]:
        """``show``'s rows of a code object record's resources in the vendor's words
        (fields the record lacks are left out)."""
        raise NotImplementedError

    def device_for(self, target: str):
        """(device, "") or (None, why): ``runtime``'s device for ``target``."""
        raise NotImplementedError

    def resident_ctas(self, co: dict, target: str) -> int | None:
        """How many CTAs of the kernel whose record is ``co`` one CU of ``target`` runs at
        once (registers, shared memory, threads), for the split rule's waves; None where
        this backend does not model it or the target has no ``devices.CuLimits``."""
        return None


BACKENDS: dict[str, Backend] = {}


def register(backend: Backend) -> Backend:
    BACKENDS[backend.name] = backend
    return backend


def add_target(target: Target) -> None:
    """A catalog entry of a registered backend from outside the tree (a plugin's target)."""
    if target.backend not in BACKENDS:
        raise ValueError(f"{target.name}: no backend {target.backend!r} is registered")
    TARGETS[target.name] = target


def backend_of(target: str) -> Backend:
    """The backend the catalog names for ``target``; KeyError for an unknown target."""
    return BACKENDS[get_target(target).backend]
