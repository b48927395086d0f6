"""verify --label: reproduce and numerics only on the entries a regular expression finds in
their label (integrity and structure still on every entry); a bad expression is one line,
exit 2."""

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
    # integrity and structure saw all 18 entries and the 2 stage-2 kernels
    assert doc["checked"] == 20


def test_a_bad_expression_is_one_line(small_cache):
    r = _verify(small_cache, "--level", "numerics", "--label", "t32x(")
    assert r.exit_code == 2
    assert r.output.startswith("error: --label: 't32x(' is not a regular expression: ")
    assert r.output.count("\n") == 1
