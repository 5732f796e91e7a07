"""The comparison in the terminal: a table of the aggregate metrics per group and one of the
probability of improvement of each pair (rich)."""

from __future__ import annotations

from pgrad_app.experiments.compare.comparison import Comparison
from pgrad_app.experiments.compare.metrics import Estimate


def _cell(e: Estimate) -> str:
    return f"{e.point:.3g} [{e.low:.3g}, {e.high:.3g}]"


def print_summary(c: Comparison, console=None) -> None:
    """Prints what was compared, the metrics table and the pairs table."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console(highlight=False)
    refs = c.table.refs
    scored = (f"the mean return of the last {c.options.last_episodes} training episodes"
              if c.options.last_episodes else "the final deterministic evaluation")
    whats = ", ".join(sorted({r.what for r in refs.values()})) if refs else ""
    units = f"normalised (0: random, 1: {whats})" if refs else "raw returns"
    console.print(f"{len(c.table.groups)} group(s) on {len(c.table.envs)} env(s) "
                  f"({', '.join(c.table.envs)}); score: {scored}; {units}; 95% stratified "
                  f"bootstrap CIs, {c.options.reps} resamples (rliable)")
    table = Table(title=f"aggregate {c.unit} over runs and envs")
    table.add_column("group")
    table.add_column("runs", justify="right")
    for name in c.names:
        table.add_column(f"{name} [95% CI]", justify="right")
    for g in c.table.groups:
        table.add_row(g, str(c.scores[g].shape[0] * c.scores[g].shape[1]),
                      *(_cell(e) for e in c.estimates[g]))
    console.print(table)
    if c.pairs:
        pairs = Table(title="probability of improvement P(X > Y)")
        for column in ("X", "Y", "P(X > Y) [95% CI]"):
            pairs.add_column(column)
        for x, y, e in c.pairs:
            pairs.add_row(x, y, _cell(e))
        console.print(pairs)
