"""verify --label: structure, reproduce and numerics only on the entries a regular
expression finds in their label (integrity still on every entry); a bad expression is one
line, exit 2."""

from __future__ import annotations

import json

from click.testing import CliRunner

from wgradcache.cli import main


def _verify(small_cache, *extra):
    return CliRunner().invoke(main, ["verify", "--from-cache", "--cache-dir",
                                     str(small_cache["cache"]), "--geometries",
                                     str(small_cache["geometries"]), "--json", *extra])


def test_label_picks_the_numerics_rows(small_cache):
    r = _verify(small_cache, "--level", "numerics", "--label", "fp16-.*-sync-default-none$")
    doc = json.loads(r.stdout)
    assert r.exit_code == 0, doc["failures"]
    ran = {n["label"] for n in doc["numerics"]}
    assert ran == {"gfx1250-fp16-t32x32x32-w1x1-v8x8-sync-default-none"}
    assert doc["checked"] == 20


def test_integrity_sees_every_entry_structure_on_only_those_found(small_cache):
    from wgradcache.pipeline.verify import VerifyRequest, verify

    rep = verify(VerifyRequest(cache_dir=str(small_cache["cache"]), level="structure",
                               geometries_file=str(small_cache["geometries"]),
                               label="bf16-.*-async-"))
    by_level: dict[str, set[str]] = {}
    for _, label, level in rep.passed_cases:
        by_level.setdefault(level, set()).add(label)
    assert len(by_level["integrity"]) == 20
    kernels = {lab for lab in by_level["structure"] if lab.startswith("gfx1250-")}
    assert kernels and all("bf16-" in lab and "-async-" in lab for lab in kernels)
    assert len(by_level["structure"] - kernels) == 2  # the stage-2 kernels
    assert not rep.failures


def test_a_bad_expression_is_one_line(small_cache):
    r = _verify(small_cache, "--level", "numerics", "--label", "t32x(")
    assert r.exit_code == 2
    assert r.output.startswith("error: --label: 't32x(' is not a regular expression: ")
    assert r.output.count("\n") == 1
