"""`evalframe runs`: the experiment's recent evalframe runs, newest first (id, name, when, scorers and
their means), so a run can be picked for compare or rescore (which also take `last`, `last~1` or the
start of a name: tracking.read.resolve). Reads only: no store is created, nothing is logged.
"""

from __future__ import annotations

from datetime import datetime

from evalframe.config import compose as configs
from evalframe.errors import ConfigError
from evalframe.report import console as report
from evalframe.results.summary import fmt
from evalframe.tracking.read import RunLine, recent_runs
from evalframe.tracking.store import display_uri

DEFAULT_N = 20
USAGE = (
    f"usage: evalframe runs [tracking.uri=URI] [experiment=NAME] [n={DEFAULT_N}]\n"
    "  the experiment's newest evalframe runs (tracking.uri=..., else $MLFLOW_TRACKING_URI, else "
    "./mlflow.db;\n  experiment=..., else evalframe). compare and rescore take an id from here, or last, "
    "last~1, or the start of a name"
)


def _arguments(argv: list[str]) -> tuple[str, str, int]:
    """(tracking URI, experiment, how many runs) from `key=value` arguments; the defaults a run logs to."""
    given: dict[str, str] = {}
    for arg in argv:
        key, equals, value = arg.partition("=")
        key = {"tracking.experiment": "experiment"}.get(key, key)
        if not equals or key not in ("tracking.uri", "experiment", "n") or not value:
            raise ConfigError(f"runs: cannot read {arg!r}\n{USAGE}")
        given[key] = value
    n = given.get("n", str(DEFAULT_N))
    if not n.isdigit() or int(n) < 1:
        raise ConfigError(f"runs: n={n}: give how many runs to list, e.g. n={DEFAULT_N}")
    tracking = configs.resolve(configs.compose([]))["tracking"]
    uri = given.get("tracking.uri") or str(tracking["uri"])
    return uri, given.get("experiment") or str(tracking["experiment"]), int(n)


def _row(run: RunLine) -> list[str]:
    means = "  ".join(f"{s} {fmt(run.means.get(s))}" for s in run.scorers)
    when = datetime.fromtimestamp(run.logged).strftime("%Y-%m-%d %H:%M")
    status = "" if run.status == "FINISHED" else f" ({run.status.lower()})"
    return [run.run_id, run.name + status, when, means]


def main(argv: list[str]) -> int:
    uri, experiment, n = _arguments(argv)
    runs = recent_runs(uri, experiment, n)
    where = f"experiment {experiment!r} at {display_uri(uri)}"
    if not runs:
        print(f"no evalframe run in {where} yet")
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"the {len(runs)} newest runs of {where}", title_justify="left")
    table.add_column("run id", no_wrap=True)  # copied whole into compare/rescore: never cut
    table.add_column("name", overflow="fold")
    # When MLflow got it (its start time): the name's time is when the run itself started.
    table.add_column("logged", no_wrap=True)
    table.add_column("scorers: means", overflow="fold")
    for run in runs:
        table.add_row(*_row(run))
    # Piped (grep, a file, CI's log): wide enough for a run to a line. A terminal: its own width.
    Console(width=None if report.console.is_terminal else 240).print(table)
    print("compare baseline=last~1 candidate=last, rescore run_id=last (or an id, or the start of a name)")
    return 0
