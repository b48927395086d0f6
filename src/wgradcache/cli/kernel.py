"""``wgradcache emulate`` rendering: serve check, one emulated run, the verdict."""

from __future__ import annotations

import click

from wgradcache.cli.console import UserError, emit_json

__all__ = ["run_emulate"]


def run_emulate(spec, problem_text: str, split_k: int | None, seed: int, as_json: bool) -> bool:
    from wgradcache.model.problem import ConvProblem
    from wgradcache.model.spec import validate
    from wgradcache.pipeline.emulate import run_emulated
    from wgradcache.wgrad.capability import serves

    try:
        problem = ConvProblem.parse(problem_text)
    except ValueError as e:
        raise UserError(f"--problem {problem_text}: {e}") from None
    ok, why = validate(spec)
    if not ok:
        raise UserError(f"{spec.label()}: {why}")
    ok, why = serves(spec, problem, split_k)
    if not ok:
        raise UserError(f"{spec.label()} cannot serve {problem_text}: {why}")
    r = run_emulated(spec, problem, split_k=split_k, seed=seed)
    doc = {"label": r.label, "problem": r.problem, "split": r.plan.describe(),
           "split_k": r.plan.degree, "reduction": r.plan.reduction,
           "error": None if r.out is None else r.error, "bound": r.bound.bound,
           "bound_terms": dict(r.bound.terms), "passed": r.passed, "hazard": r.hazards}
    if as_json:
        emit_json(doc)
    else:
        click.echo(r.summary())
    return r.passed
