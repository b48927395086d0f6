"""Reference layer sets: the shipped one loads; a bad entry is named."""

from __future__ import annotations

from pathlib import Path

import pytest

from wgradcache.numerics.layers import load_layers


def test_reference_layer_set_loads():
    layers = load_layers(Path(__file__).resolve().parents[2] / "layers" / "reference.yaml")
    assert len(layers) == len({la.name for la in layers}) >= 40
    by_name = {la.name: la for la in layers}
    stem = by_name["resnet50/conv1"].problem
    assert (stem.Ho, stem.Wo, stem.wg_N, stem.wg_K) == (112, 112, 7 * 7 * 3, 32 * 112 * 112)
    dw = by_name["mobilenetv2/dw56"].problem
    assert (dw.kpg, dw.cpg, dw.groups) == (1, 1, 144)
    assert by_name["deeplabv3/aspp.d24"].problem.Ho == 65
    assert {la.problem.groups > 1 for la in layers} == {True, False}
    assert all(la.count >= 1 for la in layers)


def test_load_layers_names_the_bad_entry(tmp_path):
    f = tmp_path / "l.yaml"
    f.write_text("schema: 1\nlayers:\n  - {name: a, problem: '1,3,8,8,4,3,3'}\n"
                 "  - {name: b, problem: '1,6,8,8,4,3,3,1,1,1,4'}\n")
    with pytest.raises(ValueError, match=r"layers\[1\] \(b\): .*C=6 is not divisible"):
        load_layers(f)
    f.write_text("schema: 1\nlayers:\n  - {name: a, problem: '1,3,8,8,4,3,3'}\n"
                 "  - {name: a, problem: '1,3,8,8,4,3,3'}\n")
    with pytest.raises(ValueError, match="repeated name 'a'"):
        load_layers(f)
