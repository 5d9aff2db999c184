"""The run's record on disk: results.jsonl (append-only, one finished item per line, flushed as each
item finishes: results_file.py encodes and reads its lines) and run.json (results.manifest: the resolved
config, its fingerprint and whether the run finished).

A run killed half-way keeps every finished item; `resume=true` reads them back and scores only the
rest; `evalframe log-run DIR` logs a finished run to MLflow later (when the tracking server was down).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
from collections.abc import Collection, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from evalframe.errors import ConfigError, StorageError
from evalframe.redaction import redact, redact_overrides
from evalframe.results.manifest import MANIFEST, Manifest
from evalframe.results.results_file import Finished, encode
from evalframe.results.scores import GateVerdict, ItemResult, Objective

RESULTS = "results.jsonl"
TORN = "results.jsonl.torn"  # last lines cut short by a kill or a full disk, set aside on resume
# Keys that do not change what a run computes: a run may be resumed or re-logged with other values.
_NOT_FINGERPRINTED = (
    *("resume", "tracking", "concurrency", "cache", "gate", "max_unscored_rate", "objective"),
    *("window", "keep_items", "raw_reply_limit"),
)


def new_run_dir(base: str | Path) -> Path:
    """A directory of the run's own: `base` (outputs/DATE/TIME), or `base-2`, `base-3`, ... when
    another run took it in the same second. Created here, exclusively (mkdir fails if it exists), so
    two runs never share a directory and interleave their results, whatever the timing."""
    base = Path(base)
    base.parent.mkdir(parents=True, exist_ok=True)
    for n in itertools.count(1):
        candidate = base if n == 1 else base.with_name(f"{base.name}-{n}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        return candidate
    raise AssertionError("unreachable")


def fingerprint(config: dict[str, Any]) -> str:
    """What makes two runs the same computation (secrets blanked: a resumed run may rotate its key)."""
    config = redact(config)
    essential = {k: v for k, v in config.items() if k not in _NOT_FINGERPRINTED}
    return hashlib.sha256(json.dumps(essential, sort_keys=True, default=str).encode()).hexdigest()[:16]


class Journal:
    def __init__(self, directory: Path):
        self.directory = directory
        self.path = directory / RESULTS
        self._file: TextIO | None = None

    @property
    def manifest(self) -> Manifest:
        return Manifest.read(self.directory)

    def start(
        self,
        config: dict[str, Any],
        total: int,
        resume: bool = False,
        overrides: list[str] | None = None,
        inputs: str = "",
        digests: Mapping[str, str] | None = None,
        started: float | None = None,
    ) -> None:
        """Begin (or, with resume, continue) the run's record; `inputs` is the digest of the rows and
        the target's prompt or code (the config's fingerprint cannot see a dataset file edited in place);
        `digests`, each scorer's verdict digest, go onto the verdicts written back onto traces, also
        when `evalframe log-run` writes them later; `started` is when the run first started (see
        started_at)."""
        safe = redact(config)  # the manifest is a file on disk like any other: no secrets in it
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._write_manifest(
                Manifest(
                    status="running",
                    fingerprint=fingerprint(safe),
                    inputs=inputs,
                    total=total,
                    config=safe,
                    overrides=redact_overrides(overrides or []),
                    digests=dict(digests or {}),
                    started_at=started,
                )
            )
            # Line-buffered: every finished item reaches the OS as soon as it is written, so SIGKILL
            # cannot lose it.
            self._file = self.path.open("a" if resume else "w", encoding="utf-8", buffering=1)
        except OSError as e:
            raise self._full(e) from None

    def append(self, item: ItemResult) -> None:
        assert self._file is not None, "start() the journal first"
        try:
            self._file.write(encode(item))
        except OSError as e:  # a full disk: stop, keeping every finished item (a cut line is set aside)
            self.close()
            raise self._full(e) from None

    def append_line(self, line: str) -> None:
        """An item already serialised (a line of another journal, ending in a newline)."""
        assert self._file is not None, "start() the journal first"
        try:
            self._file.write(line if line.endswith("\n") else line + "\n")
        except OSError as e:
            self.close()
            raise self._full(e) from None

    def _full(self, e: OSError) -> StorageError:
        return StorageError(
            f"cannot write {e.filename or self.path} ({e.strerror}): the run stopped; its finished items "
            f"are kept in {self.path}. Free some space, then continue with the same command plus "
            f"resume={self.directory}"
        )

    def resumed(self, inputs: str | None, scorers: Collection[str]) -> Finished:
        """The items a run being resumed finished by all its `scorers` (the others are scored again),
        once its inputs are checked (None: not) and a torn last line is set aside."""
        if inputs is not None:
            self.check_inputs(inputs)
        self.set_aside_torn_line()
        return Finished(self.path, scorers)

    def started_at(self) -> float | None:
        """When the run being resumed first started (seconds since the epoch; None: not recorded). A
        trace dataset's time window counts from it (dataset.until: null is that instant, 24h before
        it), so a resumed run reads the traces it started on, not those logged since."""
        started = self.manifest.started_at
        return float(started) if isinstance(started, int | float) else None

    def check_inputs(self, inputs: str) -> None:
        """Before resuming: refuse when the rows or the target changed since the run started, or its
        finished items would keep scores of other data. A fresh run costs only what changed: the judge
        cache answers every request it already made."""
        started = self.manifest.inputs
        if started and started != inputs:
            raise ConfigError(
                f"resume: the dataset's rows or the target's prompt or code changed since the run in "
                f"{self.directory} started, so its finished items would keep stale scores; run again "
                "without resume (the judge cache answers the unchanged items at no cost)"
            )

    def set_aside_torn_line(self) -> None:
        """Before resuming: a kill or a full disk in the middle of a write leaves a last line without
        its newline. Appending would glue the next item onto it, losing both; instead the fragment moves
        to results.jsonl.torn (its item is not done, so it is scored again)."""
        if not self.path.is_file():
            return
        with self.path.open("rb+") as f:
            size = f.seek(0, os.SEEK_END)
            if size == 0:
                return
            f.seek(size - 1)
            if f.read(1) == b"\n":
                return
            start = end = size
            while start > 0:  # back to the last complete line's newline, a block at a time
                start = max(0, end - 65536)
                f.seek(start)
                newline = f.read(end - start).rfind(b"\n")
                if newline >= 0:
                    start += newline + 1
                    break
                end = start
            f.seek(start)
            fragment = f.read()
            with (self.directory / TORN).open("ab") as torn:
                torn.write(fragment + b"\n")
            f.truncate(start)

    def finish(
        self,
        means: dict[str, float] | None = None,
        objective: Objective | None = None,
        verdict: GateVerdict | None = None,
        facts: dict[str, str] | None = None,
        merging: Mapping[str, Any] | None = None,
        verdicts_due: bool = False,
    ) -> None:
        """Mark the run finished; `means` per scorer and the objective ({"metric", "value", "direction"})
        feed the table printed at the end of a sweep, and the sweep's charts; the gate's verdict and
        what was run (dataset, judges, date, version) say what happened; `verdicts_due`: its verdicts
        go onto traces next (until they are written, resume and log-run complete them)."""
        if self._file:
            try:
                self._file.close()
            except OSError as e:
                raise self._full(e) from None
            finally:
                self._file = None
        record = replace(
            self.manifest, status="finished", means=means or {}, about=facts or {}, verdicts_due=verdicts_due
        )
        record.merging = dict(merging or {})  # what a merge of shards needs (evalframe.run.merged)
        if objective is not None:
            record.objective = objective.to_json()
        if verdict is not None:
            record.gate = {"verdict": verdict.word, "exit_code": verdict.code, "failed": list(verdict.failed)}
        self._write_manifest(record)

    def logged(self, run_id: str) -> None:
        """Note the MLflow run the results went to: `evalframe log-run DIR` does not log them twice."""
        self._write_manifest(replace(self.manifest, mlflow_run_id=run_id))

    def wrote_verdicts(self) -> None:
        """Note that the verdicts went onto their traces: logging the run again does not write them twice."""
        self._write_manifest(replace(self.manifest, verdicts_written=True))

    def close(self) -> None:
        if self._file:
            file, self._file = self._file, None
            with contextlib.suppress(OSError):  # a full disk: an unflushed line is cut, set aside on resume
                file.close()

    def _write_manifest(self, manifest: Manifest) -> None:
        try:
            manifest.write(self.directory)
        except OSError as e:
            raise self._full(e) from None


def find_resumable(outputs: Path, config: dict[str, Any]) -> Path | None:
    """The newest unfinished run under `outputs` with the same fingerprint as `config`: one stopped
    before its end, or after it while writing its verdicts onto traces (Manifest.verdicts_pending)."""
    wanted = fingerprint(config)
    manifests = sorted(outputs.rglob(MANIFEST), key=lambda p: p.stat().st_mtime, reverse=True)
    for path in manifests:
        try:
            manifest = Manifest.read(path.parent)
        except ConfigError:  # a record this evalframe cannot read is no run of this config
            continue
        unfinished = manifest.status == "running" or manifest.verdicts_pending
        if unfinished and manifest.fingerprint == wanted:
            return path.parent
    return None


def resume_dir(resume: Any, outputs: Path, config: dict[str, Any]) -> Path | None:
    """Where to resume from: `resume=true` finds the newest matching unfinished run, `resume=DIR` names it."""
    if resume in (None, False, "", "false"):
        return None
    if resume is True or str(resume).lower() == "true":
        found = find_resumable(outputs, config)
        if found is None:
            raise ConfigError(
                f"resume=true: no unfinished run with this configuration under {outputs}; "
                "name the run directory with resume=PATH, or drop resume"
            )
        return found
    directory = Path(str(resume)).expanduser()
    manifest = Journal(directory).manifest
    if not manifest.status:
        raise ConfigError(f"resume={resume}: {directory} holds no evalframe run ({MANIFEST} is missing)")
    if manifest.fingerprint != fingerprint(config):
        raise ConfigError(
            f"resume={resume}: that run used a different dataset, target, scorer or model configuration; "
            "resume it with the same overrides it was started with"
        )
    return directory
