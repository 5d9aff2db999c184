"""`evalframe align scorer=NAME run_id=RUN_ID [align.KEY=VALUE ...] [OVERRIDES]`: the command line of
an alignment (evalframe.run.align does it). `run_id=` is `dataset=run dataset.run_id=`: the items of
a logged run and their human scores; any dataset with `dataset.human_score` works as well. align.*
and output_dir are the command's own keys; every other argument is an override of the runs it makes.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from evalframe.cli.answered import answered
from evalframe.errors import ConfigError
from evalframe.run import align

USAGE = (
    "usage: evalframe align scorer=NAME (run_id=RUN_ID | dataset=... dataset.human_score=COLUMN) "
    "[align.holdout=0.5] [align.seed=0]\n"
    "       [align.method=examples|guidelines|both] [align.k=4] [align.retrieve=K] [align.embedding=MODEL]\n"
    "       [align.rules=2] [align.out=aligned] [align.max_calls=N] [align.comment=COLUMN] [output_dir=DIR] "
    "[OVERRIDES]\n"
    "  teaches the judge NAME from people's labels (examples, rules, from a training part of the items),\n"
    "  writes it as data to align.out (scorer=NAME_aligned with hydra.searchpath=[file://OUT]) and compares\n"
    "  both judges' agreement with people on the held-out part"
)
_TYPES = {
    "holdout": float,
    "seed": int,
    "method": str,
    "k": int,
    "out": Path,
    "max_calls": int,
    "comment": str,
    "rules": int,
    "retrieve": int,
    "embedding": str,
}


def _read(argv: list[str]) -> tuple[dict[str, object], list[str], Path | None]:
    """align.* settings, the runs' overrides and output_dir, from the command line."""
    settings: dict[str, object] = {}
    overrides: list[str] = []
    output_dir, paths = None, []
    args = iter(argv)
    for arg in args:
        if arg in ("--config-dir", "-cd") or arg.startswith("--config-dir="):
            folder = arg.partition("=")[2] or next(args, "")
            paths.append(f"file://{Path(folder).resolve()}")
            continue
        key, equals, value = arg.partition("=")
        if not equals or not value:
            raise ConfigError(f"align: cannot read {arg!r}\n{USAGE}")
        if key.startswith("align."):
            name = key.removeprefix("align.")
            if name not in _TYPES:
                raise ConfigError(f"align: unknown key {key}; it takes align.{', align.'.join(_TYPES)}")
            try:
                settings[name] = None if value == "null" else _TYPES[name](value)
            except ValueError:
                raise ConfigError(f"{key}={value}: give a {_TYPES[name].__name__}") from None
        elif key == "run_id":
            overrides += ["dataset=run", f"dataset.run_id={value}"]
        elif key == "output_dir":
            output_dir = Path(value)
        else:
            overrides.append(arg)
    if paths:
        overrides.append(f"hydra.searchpath=[{','.join(paths)}]")
    scorers = [o.partition("=")[2] for o in overrides if o.startswith("scorer=")]
    if len(scorers) != 1 or "," in scorers[0] or "[" in scorers[0]:
        raise ConfigError(f"align takes one judge: scorer=NAME\n{USAGE}")
    settings["scorer"] = scorers[0]
    return settings, overrides, output_dir


def run(argv: list[str]) -> int:
    values, overrides, output_dir = _read(argv)
    from evalframe.config import typos

    if not any(o.startswith("hydra.searchpath") for o in overrides):  # a config of one's own: Hydra's say
        typos.check(overrides)
    settings = align.Settings(**values)  # type: ignore[arg-type]  # typed by _TYPES above
    directory = output_dir or Path("outputs", datetime.now().strftime("%Y-%m-%d/%H-%M-%S"), "align")
    found = align.align(overrides, settings, directory)
    code = align.show(found, overrides, settings.out)
    print(f"alignment.json: {align.record(found, directory)}")
    return code or align.log(found, directory)  # to MLflow with tracking on: exit 3 if it cannot


def main(argv: list[str]) -> int:
    """The command's exit code; a user error is one line on stderr, never a traceback."""
    return answered(run, argv)
