"""The B gather's addressing: which element of X a k row and a column of the B tile read,
and how a k row's pixel steps a K tile on without a division.

B = X gathered implicitly: element (k, n) with k_wg -> (n_img, ho, wo) and n_wg -> (y, x, c)
reads X[n_img, ho·s − p + y·d, wo·s − p + x·d, group·cpg + c]: stride-1 along c, vectors
of ``vec_b`` | cpg never cross a (y, x) tap. A column's part (its tap) is loop-invariant
(``column_tap``); a k row's part is two magic divisions (``pixel``), or a carried state
stepped by adds (``GatherSteps.advance``). The pixel's offset in X is ``pixel_offset``,
everywhere.

A column past the tile's N edge gets the tap row ``OUTSIDE_ROW``, so the tap's own bound
rejects it and the column needs no condition of its own in the loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from wgradcache.kernel.builder import KernelBuilder
from wgradcache.kernel.ir import Value, i32
from wgradcache.wgrad.context import WgradContext, divmod_magic

__all__ = ["OUTSIDE_ROW", "Tap", "column_tap", "with_offset", "pixel", "pixel_offset",
           "row_coords", "GatherSteps", "Coords"]

OUTSIDE_ROW = -(1 << 31)  # the tap row of a column past the tile's N edge

# a k row's (wo·stride, ho·stride, element offset): the carried gather state
Coords = tuple[Value, Value, Value]


@dataclass(frozen=True)
class Tap:
    """A B column's loop-invariant part: inside wg_N, the pixel row and column of its filter
    tap relative to the k row's (y·d − p, x·d − p), its channel and, where the k rows are
    carried (``row_coords`` without a tap), its element offset from the k row's pixel."""

    ok: Value
    h_base: Value
    w_base: Value
    chan: Value
    offset: Value | None = None


def column_tap(ctx: WgradContext, chan0: Value, col: Value) -> Tap:
    """The tap of the tile's column ``col``: n = n0 + col -> (y, x, c) by two magic
    divisions; ``chan0``: the group's first channel. A column past wg_N gets the tap row
    OUTSIDE_ROW: its pixel row hi = ho·s + OUTSIDE_ROW is negative for every ho·s < 2^31,
    so the tap's bound (hi < H, unsigned) fails."""
    kb, a = ctx.kb, ctx.a
    n = kb.add(ctx.n0, col)
    y, r = divmod_magic(kb, n, a, "Xcpg")
    x, c = divmod_magic(kb, r, a, "cpg")
    ok = kb.icmp("slt", n, a["wg_N"])
    return Tap(ok, kb.select(ok, kb.sub(kb.mul(y, a["dilation"]), a["pad"]), OUTSIDE_ROW),
               kb.sub(kb.mul(x, a["dilation"]), a["pad"]), kb.add(chan0, c))


def with_offset(kb: KernelBuilder, a: dict[str, Value], tap: Tap) -> Tap:
    """``tap`` with its element offset from its k row's pixel: (h_base·W + w_base)·C + chan."""
    off = kb.add(kb.mul(tap.h_base, a["W"]), tap.w_base)
    return replace(tap, offset=kb.add(kb.mul(off, a["C"]), tap.chan))


def pixel(kb: KernelBuilder, a: dict[str, Value], k: Value, h_base: Value | None = None,
          w_base: Value | None = None) -> tuple[Value, Value, Value, Value, Value]:
    """(img, ho, wo, hi, wi) of reduction index ``k`` by the two magic divisions: hi = ho·s
    (+ ``h_base``), wi = wo·s (+ ``w_base``), the pixel a tap with those bases reads."""
    img, r = divmod_magic(kb, k, a, "HoWo")
    ho, wo = divmod_magic(kb, r, a, "Wo")
    hi = kb.mul(ho, a["stride"])
    hi = hi if h_base is None else kb.add(hi, h_base)
    wi = kb.mul(wo, a["stride"])
    wi = wi if w_base is None else kb.add(wi, w_base)
    return img, ho, wo, hi, wi


def pixel_offset(kb: KernelBuilder, a: dict[str, Value], img: Value, hi: Value,
                 wi: Value) -> Value:
    """The index of pixel (img, hi, wi) in X, in pixels: (img·H + hi)·W + wi (times C: its
    first element)."""
    return kb.add(kb.mul(kb.add(kb.mul(img, a["H"]), hi), a["W"]), wi)


def row_coords(kb: KernelBuilder, a: dict[str, Value], k: Value, tap: Tap | None) -> Coords:
    """(wo·stride, ho·stride, element offset) of reduction index ``k``, by the two magic
    divisions; ``tap``: the column's tap and channel added (None: the row's pixel alone, a
    state each column of the row adds its ``Tap.offset`` to)."""
    img, ho, wo, hi, wi = pixel(kb, a, k, None if tap is None else tap.h_base,
                                None if tap is None else tap.w_base)
    off = kb.mul(pixel_offset(kb, a, img, hi, wi), a["C"])
    return kb.mul(wo, a["stride"]), kb.mul(ho, a["stride"]), \
        (off if tap is None else kb.add(off, tap.chan))


@dataclass
class GatherSteps:
    """The uniform values that step a k row's ``Coords`` forward, once per kernel per step
    (``of`` defines them where first asked: before the loop that advances the state)."""

    kb: KernelBuilder
    a: dict[str, Value]
    tile_k: int
    vals: dict[int, tuple[Value, ...]] = field(default_factory=dict)

    def of(self, step: int | None = None) -> tuple[Value, ...]:
        """step (default tile_k) = q·HoWo + b·Wo + c, and the offset's deltas: d0 for (q,
        b, c), d1 more where wo wraps (ho + 1, wo − Wo), d2 more where ho wraps (img + 1,
        ho − Ho); b, c and the wrap bounds Wo, Ho come times the stride (``advance``)."""
        step = self.tile_k if step is None else step
        if step not in self.vals:
            kb, a = self.kb, self.a
            q, r = divmod_magic(kb, kb.const(step, i32), a, "HoWo")
            b, c = divmod_magic(kb, r, a, "Wo")
            s_c = kb.mul(a["stride"], a["C"])
            s_wc = kb.mul(s_c, a["W"])
            hwc = kb.mul(kb.mul(a["H"], a["W"]), a["C"])
            d0 = kb.add(kb.add(kb.mul(q, hwc), kb.mul(b, s_wc)), kb.mul(c, s_c))
            d1 = kb.sub(s_wc, kb.mul(a["Wo"], s_c))
            d2 = kb.sub(hwc, kb.mul(a["Ho"], s_wc))
            s = a["stride"]
            self.vals[step] = (kb.mul(b, s), kb.mul(c, s), d0, d1, d2,
                               kb.mul(a["Wo"], s), kb.mul(a["Ho"], s))
        return self.vals[step]

    def advance(self, state: list[Coords], step: int | None = None) -> list[Coords]:
        """``state`` one K tile (or ``step`` k rows) later, without a division: tile_k =
        q·HoWo + b·Wo + c (uniform, once per kernel), so wo + c and ho + b + carry each
        wrap at most once (wo, c < Wo; ho, b < Ho) and the offset moves by one of four
        uniform deltas. The state holds wo and ho times the stride s, so the steps and the
        bounds are scaled too (c·s, b·s, s, Wo·s, Ho·s: uniform). The offset is exact
        modulo 2^32, so exact wherever the vector is valid (< 2^31)."""
        kb, a = self.kb, self.a
        b, c, d0, d1, d2, wo_s, ho_s = self.of(step)
        out = []
        for ws, hs, off in state:
            ws1 = kb.add(ws, c)
            cy1 = kb.icmp("uge", ws1, wo_s)
            hs1 = kb.add(kb.add(hs, b), kb.select(cy1, a["stride"], 0))
            cy2 = kb.icmp("uge", hs1, ho_s)
            off1 = kb.add(kb.add(off, d0), kb.add(kb.select(cy1, d1, 0), kb.select(cy2, d2, 0)))
            out.append((kb.select(cy1, kb.sub(ws1, wo_s), ws1),
                        kb.select(cy2, kb.sub(hs1, ho_s), hs1), off1))
        return out
