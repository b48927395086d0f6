"""The end-of-build summary says each distinct failure reason once, with its count and up
to three labels, however many jobs failed for it; per-job detail stays in the records and
``--json``.

The failures are real: a ptxas (``$WGRADCACHE_PTXAS``) that refuses some kernels by their
symbol and hands the others to the real one, in an sm_90 build of the small walk.
"""

from __future__ import annotations

import json

from click.testing import CliRunner

from tests.conftest import small_geometries
from wgradcache.cli import main
from wgradcache.compile import discovery
from wgradcache.pipeline.plan import JobFailure
from wgradcache.pipeline.publish import FailureGroup, group_failures

P = "sm_90-fp16-t32x32x32-w1x1-"


def _refusing_ptxas(tmp_path, monkeypatch) -> None:
    real = discovery.find_ptxas()
    fake = tmp_path / "ptxas"
    fake.write_text(f"""#!/bin/sh
for a in "$@"; do src="$a"; done
case "$1" in --version) exec {real} --version ;; esac
if grep -q '_async_' "$src"; then echo 'async refused' >&2; exit 1; fi
if grep -q '_atomic\\|_two_stage' "$src"; then echo 'atomics refused' >&2; exit 1; fi
if grep -q '_cshuffle_none' "$src"; then echo 'cshuffle refused' >&2; exit 1; fi
exec {real} "$@"
""")
    fake.chmod(0o755)
    monkeypatch.setenv(discovery.PTXAS_ENV, str(fake))


def test_a_build_with_several_reasons_says_each_once(tmp_path, monkeypatch):
    _refusing_ptxas(tmp_path, monkeypatch)
    geo = small_geometries(tmp_path)
    cache = tmp_path / "cache"
    argv = ["build", "--target", "sm_90", "--dtype", "fp16", "--jobs", "1", "--geometries",
            str(geo), "--cache-dir", str(cache)]
    r = CliRunner().invoke(main, argv)
    assert r.exit_code == 1, r.output
    assert r.stderr == (
        "FAILED 4 jobs: CodegenError: ptxas failed: async refused: "
        f"{P}c16x16-async-cshuffle-atomic, {P}c16x16-async-cshuffle-none, "
        f"{P}c16x16-async-default-atomic and 1 more\n"
        "FAILED 3 jobs: CodegenError: ptxas failed: atomics refused: "
        f"{P}v8x8-sync-cshuffle-atomic, {P}v8x8-sync-default-atomic, "
        f"{P}v8x8-sync-default-two_stage-wsr8\n"
        f"FAILED {P}v8x8-sync-cshuffle-none: CodegenError: ptxas failed: cshuffle refused\n"
        "failed: 8 job(s) or stage-2 kernel(s) failed; see the failures above\n")
    # the detail is per job: one record each, and --json says what failed (built: 1)
    assert len(list((cache / "sm_90" / "failed").glob("*.json"))) == 8
    r = CliRunner().invoke(main, [*argv, "--json", "--retry-failed"])
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    assert (doc["jobs"], doc["built"], doc["up_to_date"], doc["failed"]) == (9, 0, 1, 8)
    # failed before, not compiled again: said so, still once per reason
    r = CliRunner().invoke(main, argv)
    assert r.stderr.splitlines()[2] == (
        f"FAILED {P}v8x8-sync-cshuffle-none: CodegenError: ptxas failed: cshuffle refused "
        "(failed before; --retry-failed compiles it again)")


def test_groups_are_ordered_by_count_then_reason():
    fails = [JobFailure(lab, why) for lab, why in
             (("b", "y"), ("a", "y"), ("c", "x"), ("d", "z"), ("e", "z"))]
    fails.append(JobFailure("f", "y", previous=True))
    assert group_failures(fails) == [FailureGroup("y", False, ("a", "b")),
                                     FailureGroup("z", False, ("d", "e")),
                                     FailureGroup("x", False, ("c",)),
                                     FailureGroup("y", True, ("f",))]
    assert FailureGroup("y", False, tuple("abcde")).line() == "FAILED 5 jobs: y: a, b, c and 2 more"


def test_a_failure_reports_the_keys_the_report_always_had():
    """report.json's failures keep their shape: a job's says whether it is transient, a
    failure of an earlier build says previous, a stage-2 kernel's says neither."""
    assert JobFailure("j", "r", transient=False).to_json() == {
        "label": "j", "reason": "r", "transient": False}
    assert JobFailure("j", "r", previous=True).to_json() == {
        "label": "j", "reason": "r", "previous": True}
    assert JobFailure("stage2 fp16-wsr8", "r").to_json() == {
        "label": "stage2 fp16-wsr8", "reason": "r"}
