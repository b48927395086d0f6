"""`wgradcache build`'s exit status and summary rendering."""

from __future__ import annotations

from click.testing import CliRunner

from wgradcache.cli import main
from wgradcache.pipeline.plan import JobFailure
from wgradcache.pipeline.publish import BuildSummary


def test_a_failed_stage2_kernel_fails_the_build(monkeypatch, tmp_path):
    """A two-stage entry cannot run without its stage-2 kernel: that failure is exit 1 too,
    though it is not a job (the job columns still add up)."""
    seen = []

    def fake_build(req, progress=None, on_total=None):
        seen.append(req)
        s = BuildSummary(target=req.target, jobs=3, built=3, stage2_failed=1)
        s.failures.append(JobFailure("stage2 fp16_r8", "LLVM said no"))
        return s

    monkeypatch.setattr("wgradcache.pipeline.build.build", fake_build)
    r = CliRunner().invoke(main, ["build", "--target", "gfx1250", "--jobs", "1",
                                  "--cache-dir", str(tmp_path)])
    assert r.exit_code == 1
    assert "FAILED stage2 fp16_r8: LLVM said no\n" in r.output
    assert r.output.endswith("failed: 1 job(s) or stage-2 kernel(s) failed; see the failures "
                             "above\n")
    assert [(q.target, q.jobs, q.cache_dir) for q in seen] == [("gfx1250", 1, str(tmp_path))]
