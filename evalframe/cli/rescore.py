"""`evalframe rescore run_id=ID OVERRIDES`: the command line of a re-score, read once. The logged run is
fetched from MLflow here and handed to the Hydra job(s) through the environment (a joblib sweep's
workers inherit it); the re-score itself is a mode of the run (evalframe.run.rescore)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

from evalframe.config import compose as configs
from evalframe.errors import ConfigError
from evalframe.run.rescore import FROM_ITEMS, LOGGED_RUN, USAGE, Logged, merge, top_key
from evalframe.tracking.log import OVERRIDES_TAG
from evalframe.tracking.read import fetch_run, resolve


def command_line(argv: list[str], download: Path) -> tuple[str, list[str]]:
    """`rescore run_id=ID ARGS` -> the run id and the command line Hydra runs: ARGS' flags (-m,
    --config-dir...), the logged run's own overrides, and ARGS' overrides (which win). The run is read
    from MLflow here, once: its results.jsonl goes to `download`, the rest to the environment."""
    from hydra._internal.utils import get_args_parser

    ids = [a for a in argv if a.startswith("run_id=")]
    if len(ids) != 1 or not ids[0].removeprefix("run_id="):
        raise ConfigError(f"rescore needs one run_id=...\n{USAGE}")
    run_id = ids[0].removeprefix("run_id=")
    rest = [a for a in argv if a not in ids]
    try:
        new = list(get_args_parser().parse_args(rest).overrides)
    except SystemExit:
        raise ConfigError(f"cannot read the command line {' '.join(rest)}\n{USAGE}") from None
    fixed = [o for o in new if top_key(o) in FROM_ITEMS]
    if fixed:
        raise ConfigError(
            f"rescore re-scores the stored items of run {run_id}, so {' '.join(fixed)} cannot change "
            "them: run it normally (without rescore) for other rows or outputs"
        )
    tracking = configs.compose([o for o in new if top_key(o) == "tracking"]).get("tracking", {})
    uri = tracking.get("uri")
    if not uri:
        raise ConfigError("rescore reads the run from MLflow: set tracking.uri=... (tracking=none has none)")
    run_id = resolve(str(uri), str(tracking.get("experiment")), run_id)  # last, last~1, a name's start
    logged = fetch_run(str(uri), run_id, download, require_tag=OVERRIDES_TAG)
    old = [str(o) for o in json.loads(logged.tags[OVERRIDES_TAG])]
    new_overrides = [o for o in new if o not in old]
    os.environ[LOGGED_RUN] = json.dumps(
        asdict(
            Logged(
                logged.run_id,
                logged.name,
                logged.experiment_id,
                logged.metrics,
                str(logged.results_file),
                new_overrides,
            )
        )
    )
    flags = [a for a in rest if a not in new]  # argparse wants options before the overrides
    return run_id, [*flags, *merge(old, new)]
