"""ConvProblem parsing and the GEMM view."""

from __future__ import annotations

import pytest

from wgradcache.model.problem import ConvProblem


def test_parse_full_and_defaults():
    p = ConvProblem.parse("2, 8, 9, 7, 6, 3, 3, 2, 1, 1, 2")
    assert (p.N, p.C, p.H, p.W, p.K, p.Y, p.X) == (2, 8, 9, 7, 6, 3, 3)
    assert (p.stride, p.pad, p.dilation, p.groups) == (2, 1, 1, 2)
    assert (p.Ho, p.Wo) == (5, 4)
    assert (p.kpg, p.cpg) == (3, 4)
    assert (p.wg_M, p.wg_N, p.wg_K) == (3, 3 * 3 * 4, 2 * 5 * 4)
    assert ConvProblem.parse("1,3,8,8,4,1,1") == ConvProblem(1, 3, 8, 8, 4, 1, 1)
    assert ConvProblem.parse(p.short()) == p
    assert ConvProblem(1, 3, 8, 8, 4, 1, 1).short() == "1,3,8,8,4,1,1"


def test_dilation_extent():
    p = ConvProblem.parse("1,4,10,10,4,3,3,1,0,2")
    assert (p.Ho, p.Wo) == (6, 6)


@pytest.mark.parametrize("text, why", [
    ("1,2,3", "has 3 fields"),
    ("1,2,3,4,5,6,7,8,9,10,11,12", "has 12 fields"),
    ("1,2,3,4,5,6,x", "X 'x' is not an integer"),
    ("1,2,3,4,5,6,7.5", "is not an integer"),
    ("1,6,8,8,4,3,3,1,1,1,4", "C=6 is not divisible by groups=4"),
    ("1,8,8,8,6,3,3,1,1,1,4", "K=6 is not divisible by groups=4"),
    ("1,4,2,2,4,5,5", "empty output"),
    ("0,4,8,8,4,3,3", "N must be >= 1"),
    ("1,4,8,8,4,3,3,1,-1", "pad must be >= 0"),
    ("1,4,8,8,4,3,3,0", "stride must be >= 1"),
    ("1_000,4,8,8,4,3,3", "N '1_000' is not an integer (ASCII digits 0-9, at most 2147483647)"),
    ("\uff11,4,8,8,4,3,3", "N '\uff11' is not an integer"),  # full-width 1
    ("1,\u0664,8,8,4,3,3", "C '\u0664' is not an integer"),  # Arabic-Indic 4
    ("+1,4,8,8,4,3,3", "N '+1' is not an integer"),
    ("1,4,8,8,4,3,0x3", "X '0x3' is not an integer"),
    ("1,4,8,8,4,3,3,1,0,1,2147483648", "groups must be <= 2147483647 (2**31-1), got 2147483648"),
    ("9" * 30 + ",4,8,8,4,3,3", "N '99999999999999999999'... is not an integer"),
    ("1," * 100_000 + "1", "problem has 100001 fields; expected"),
])
def test_parse_rejects_with_reason(text, why):
    with pytest.raises(ValueError) as e:
        ConvProblem.parse(text)
    assert why in str(e.value)
    assert "\n" not in str(e.value) and len(str(e.value)) < 200


def test_the_field_bound_is_checked_on_construction_too():
    assert ConvProblem(1, 4, 8, 2 ** 31 - 1, 4, 3, 3).W == 2 ** 31 - 1
    with pytest.raises(ValueError, match=r"W must be <= 2147483647 \(2\*\*31-1\), got 2147483648"):
        ConvProblem(1, 4, 8, 2 ** 31, 4, 3, 3)
