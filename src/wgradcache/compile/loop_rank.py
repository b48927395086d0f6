"""Which loop of a listing is its main (K) loop: one order for every listing the tool reads,
the AMD disassembly (``isa.main_loop``) and NVIDIA's PTX and SASS (``cubin``). It stands
apart because ``isa`` dispatches to ``cubin`` for NVIDIA listings."""

from __future__ import annotations

__all__ = ["main_loop_rank"]


def main_loop_rank(mmas: int, start: int, end: int) -> tuple[int, int, int]:
    """The key whose greatest loop is the main loop: the most MMAs; among equals the first
    in program order (a K loop split into a steady state over whole tiles and a checked
    tail, ``kloop.async_k_loop``, runs the first for all tiles but the last one or two),
    then the outermost of the backward branches to one header (the whole body)."""
    return mmas, -start, end
