"""``verify --level reproduce`` runs its compiles through the job runner with the runner's
own options (workers, the default job timeout, loky), not a build request made up for it."""

from __future__ import annotations

from wgradcache.pipeline import workers
from wgradcache.pipeline.plan import DEFAULT_JOB_TIMEOUT, BuildRequest
from wgradcache.pipeline.verify_reproduce import reproduce_all


def test_reproduce_hands_the_runner_its_options(monkeypatch):
    seen = []
    monkeypatch.setattr(workers, "run_chunked", lambda tasks, opts, *a, **k:
                        seen.append((tasks, opts)))
    assert reproduce_all("gfx1250", [], jobs_n=3) == {}
    assert seen == [([], workers.RunOptions(n_jobs=3, job_timeout=300.0, backend="loky"))]
    assert DEFAULT_JOB_TIMEOUT == BuildRequest(target="gfx1250").job_timeout == 300.0
