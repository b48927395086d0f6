"""``wgradcache select`` rendering: checks input, one library call, table or --json."""

from __future__ import annotations

import click

from wgradcache.cli.console import RunFailed, UserError, emit_json, table

__all__ = ["run_select"]


def run_select(target, problem_text, dtype, from_walk, all_widths, limit, geometries_file,
               cache_dir, as_json) -> None:
    from wgradcache.model.problem import ConvProblem
    from wgradcache.model.spec import DTYPE_KEYS
    from wgradcache.model.targets import TARGETS
    from wgradcache.pipeline.select import candidates_from_cache, candidates_from_walk, select

    if target not in TARGETS:
        raise UserError(f"unknown target {target!r}; valid: {', '.join(TARGETS)}")
    if dtype not in DTYPE_KEYS:
        raise UserError(f"unknown dtype {dtype!r}; valid: {', '.join(DTYPE_KEYS)}")
    try:
        problem = ConvProblem.parse(problem_text)
    except ValueError as e:
        raise UserError(f"--problem {problem_text}: {e}") from None
    specs = (candidates_from_walk(target, dtype, geometries_file) if from_walk
             else candidates_from_cache(str(cache_dir), target, dtype))
    found = select(target, problem, specs, prune=not all_widths)
    shown = found[:limit] if limit else found
    if as_json:
        emit_json([c.to_json() for c in shown])
    else:
        table(f"{len(found)} kernel(s) serve {problem_text} on {target} ({dtype}, "
              f"{'walk' if from_walk else cache_dir})",
              ("#", "label", "split", "grid", "block", "LDS", "workspace"),
              [(i + 1, c.spec.label(), c.degree, "x".join(map(str, c.grid)), c.block,
                c.lds_bytes, c.workspace_bytes) for i, c in enumerate(shown)], numeric_from=2)
    if not found:
        if not as_json:
            click.echo("no kernel serves this problem", err=True)
        raise RunFailed(f"no cached kernel serves {problem_text} on {target}")
