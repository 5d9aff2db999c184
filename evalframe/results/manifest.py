"""run.json, typed and versioned: what a run directory says of its run (its resolved config, fingerprint,
status, means, gate, where it was logged). Every reader and writer goes through `Manifest.read` and
`Manifest.write`, which writes it atomically (paths.write_atomically, as a sweep's sweep.json), so a
kill never leaves half of one.

A record carries its format (`format`); one written before formats were recorded is format 1, which
has the same fields. A record from a newer evalframe is refused in one line rather than misread."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from evalframe.errors import ConfigError
from evalframe.paths import write_atomically

MANIFEST = "run.json"
FORMAT = 2  # 1: the same fields, before run.json said its format


@dataclass
class Manifest:
    status: str = ""  # "running", "finished"; "": no run recorded here
    fingerprint: str = ""  # what makes two runs the same computation (journal.fingerprint)
    inputs: str = ""  # digest of the rows and the target's prompt or code: what a resume checks
    total: int = 0  # rows the run scores
    config: dict[str, Any] = field(default_factory=dict)  # resolved, secrets blanked
    overrides: list[str] = field(default_factory=list)  # the command line, secrets blanked
    digests: dict[str, str] = field(default_factory=dict)  # each scorer's verdict digest, for the traces
    started_at: float | None = None  # when the run first started (kept when it is resumed)
    means: dict[str, float] = field(default_factory=dict)
    about: dict[str, str] = field(default_factory=dict)  # what was run: dataset, judges, date, version
    merging: dict[str, Any] = field(default_factory=dict)  # what a merge of shards needs (run.merged)
    objective: dict[str, Any] | None = None  # results.objective's JSON
    gate: dict[str, Any] | None = None  # the gate's verdict: {"verdict", "exit_code", "failed"}
    mlflow_run_id: str | None = None  # once the run is in MLflow: log-run does not log it twice
    verdicts_written: bool = False  # once its verdicts are on their traces: not written twice
    # Its verdicts go onto traces (its mode writes them, items came from traces): until they are all
    # written, the run is not done (a kill in the write-back): resume and log-run write what is missing.
    verdicts_due: bool = False
    format: int = FORMAT

    @property
    def finished(self) -> bool:
        return self.status == "finished"

    @property
    def verdicts_pending(self) -> bool:
        """Finished, but its verdicts were not all written onto its traces (killed while writing them,
        or the store could not take its run): what `resume` and `log-run` complete."""
        return self.finished and self.verdicts_due and not self.verdicts_written

    @classmethod
    def read(cls, directory: Path) -> Manifest:
        """The run recorded in `directory` (an empty Manifest when there is none). A record this
        evalframe cannot read (a newer format, or not a run record) is a ConfigError naming it."""
        path = directory / MANIFEST
        if not path.is_file():
            return cls()
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ConfigError(f"{path} is not a readable run record ({e}); move it out of the way") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path} is not a run record (a JSON object); move it out of the way")
        made = int(data.get("format") or 1)
        if made > FORMAT:
            raise ConfigError(
                f"{path} was written by a newer evalframe (run record format {made}; this one reads up to "
                f"{FORMAT}): upgrade evalframe to read it (pip install -U evalframe)"
            )
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known and v is not None} | {"format": FORMAT})

    def write(self, directory: Path) -> None:
        write_atomically(directory / MANIFEST, json.dumps(asdict(self), indent=1, default=str))
