"""What the two operands' loads share: a thread's slots of the K tile, the LDS tile they
land in, the buffer they read, and the one offset an invalid vector gets.

Each operand is its own type, ``operand_a.DyOperand`` (A = dY, rows read as memory holds
them) and ``operand_b.XOperand`` (B = X, gathered through the filter taps); the copies
(``copies``) ask each for its addresses and never which operand it is.

Every out-of-range element (reduction tail, padding, stride/dilation holes, partial M/N
tiles) reads zero without a branch. The sync loop's loads are bounded loads (a buffer
resource on AMD, DESIGN §4): an invalid vector gets the byte offset ``INVALID_OFFSET``,
past every buffer ``serves`` admits, and the hardware's range check returns zeros; no
exec-mask branch per vector. The async copies have no range check: their predicate is
explicit (``copies.async_chunk_predicate``). Offsets of valid elements fit 31 bits
(``serves`` bounds every buffer), so i32 arithmetic is exact there; for invalid ones it may
wrap, harmlessly, since the offset is replaced (sync: past the range; async: 0, the copy
landing in a scratch slot).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from wgradcache.kernel.builder import KernelBuilder
from wgradcache.kernel.ir import Value
from wgradcache.wgrad.context import WgradContext
from wgradcache.wgrad.gather import Coords
from wgradcache.wgrad.slots import Slot

__all__ = ["Operand", "INVALID_OFFSET", "sign_pick", "or_signs", "Address", "BoundedLoad"]

INVALID_OFFSET = 0x80000000  # past every buffer serves admits (< 2^31 bytes), any access size

# a vector's (valid predicate, None: always; element offset) in the operand's buffer
Address = tuple[Value | None, Value]
# a bounded load's (byte offset, record size in bytes, record start: None, the buffer's)
BoundedLoad = tuple[Value, Value, Value | None]


@dataclass(frozen=True)
class Operand(ABC):
    """Per-thread, loop-invariant part of one operand's loads: its slots (``slots``), the
    vector width, where its tile sits in a stage, the transpose depth. A subclass says
    where each vector of a K tile is: ``at`` (async copies), ``bounded`` (sync loads)."""

    ctx: WgradContext
    width: int
    slots: list[Slot]
    lds_base: int  # element offset of this operand's tile inside a stage
    depth: int  # k rows per transposed group (K-contiguous tile); 0: K-outer tile

    arg: ClassVar[str]  # the ABI name of its buffer: ``<arg>_ptr``, ``<arg>_bytes``
    # a chunk of a whole tile (``at(whole=True)``) lies inside the buffer and is valid: the
    # copy needs no predicate and no zero fill
    whole_inside: ClassVar[bool]

    @property
    def buf(self) -> Value:
        return self.ctx.a[f"{self.arg}_ptr"]

    @property
    def nbytes(self) -> Value:
        return self.ctx.a[f"{self.arg}_bytes"]

    @abstractmethod
    def at(self, kt: Value, state: list[Coords] | None = None,
           whole: bool = False) -> list[Address]:
        """Per slot, (valid predicate, element offset) of K tile ``kt``; ``state``: B's
        carried gather state; ``whole``: the tile lies wholly inside the slice."""

    @abstractmethod
    def bounded(self, kt: Value, state: list[Coords] | None = None) -> list[BoundedLoad]:
        """Per slot, the bounded load of K tile ``kt``'s vector: zeros where invalid."""


def sign_pick(kb: KernelBuilder, bad: Value, off: Value, past: Value) -> Value:
    """``past`` where ``bad`` < 0, else ``off``: (m & past) | (~m & off), m = bad >> 31."""
    m = kb.ashr(bad, 31)
    return kb.or_(kb.and_(m, past), kb.and_(kb.not_(m), off))


def or_signs(kb: KernelBuilder, *xs: Value | None) -> Value | None:
    """The OR of quantities each negative exactly where its condition fails (None: always
    holds), so the result is negative where any fails; None if all are None."""
    out = None
    for x in xs:
        if x is not None:
            out = x if out is None else kb.or_(out, x)
    return out
