"""``wgradcache verify`` for people and machines: progress, summary, JUnit, --json."""

from __future__ import annotations

import click

from wgradcache.cli.console import UserError, emit_json, progress, table
from wgradcache.pipeline.verify import VerifyRequest, verify, write_junit

__all__ = ["run_verify"]


def run_verify(cache_dir, targets, level, sample, seed, problems, device, junit,
               geometries_file, as_json) -> bool:
    from wgradcache.cache.catalog import cache_targets
    from wgradcache.model.problem import ConvProblem
    from wgradcache.model.targets import TARGETS

    if not targets and not cache_targets(cache_dir):
        raise UserError(f"no cache under {cache_dir}: nothing to verify (build one with "
                        "`wgradcache build --target gfx1250`)")

    for t in targets:
        if t not in TARGETS:
            raise UserError(f"unknown target {t!r}; valid: {', '.join(TARGETS)}")
    for p in problems:
        try:
            ConvProblem.parse(p)
        except ValueError as e:
            raise UserError(f"--problem {p}: {e}") from None
    req = VerifyRequest(cache_dir=str(cache_dir), targets=tuple(targets), level=level,
                        sample=sample, seed=seed, problems=tuple(problems), device=device,
                        geometries_file=geometries_file)
    state: dict = {}

    def on_total(n: int) -> None:
        state["bar"] = progress(n, "numerics", enabled=not as_json)
        state["advance"] = state["bar"].__enter__()

    try:
        rep = verify(req, advance=lambda n: state.get("advance", lambda _: None)(n),
                     on_total=on_total)
    finally:
        if "bar" in state:
            state["bar"].__exit__(None, None, None)
    if junit:
        write_junit(rep, junit)
    if as_json:
        emit_json(rep.to_json())
        return rep.ok
    for note in rep.notes:
        click.echo(note, err=True)
    for f in rep.failures:
        click.echo(f"FAIL [{f.level}] {f.label or f.key}: {f.reason}", err=True)
    table(f"verify --level {level}: {'ok' if rep.ok else 'FAILED'}",
          ("target", "entries", "expected (count)", "missing", "complete"),
          [(t, d["entries"], d["expected"], d["missing"], "yes" if d["complete"] else "no")
           for t, d in rep.targets.items()])
    click.echo(f"checked {rep.checked}, failed {len(rep.failures)}")
    return rep.ok
