"""``wgradcache emulate`` rendering: serve check, one emulated run, the verdict."""

from __future__ import annotations

import click

from .console import UserError, emit_json

__all__ = ["run_emulate"]


def run_emulate(spec, problem_text: str, split_k: int | None, seed: int, as_json: bool) -> bool:
    from .capability import serves
    from .problem import ConvProblem
    from .spec import validate
    from .wgrad.run import run_emulated

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
    doc = r.to_json()
    if as_json:
        emit_json(doc)
    else:
        click.echo(f"{spec.label()} on {problem_text}: {doc.get('split', '')}")
        click.echo(f"peak-normalised error {r.error:.3e}, bound {r.bound:.3e}: "
                   f"{'PASS' if r.passed else 'FAIL'}")
        for h in doc.get("hazards", []):
            click.echo(f"hazard: {h}")
    return r.passed
