"""The run's record on disk: results.jsonl (append-only, one finished item per line, flushed as each
item finishes) and run.json (the resolved config, its fingerprint and whether the run finished).

A run killed half-way keeps every finished item; `resume=true` reads them back and scores only the
rest; `log_run=DIR` logs a finished run to MLflow later (when the tracking server was down).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, TextIO

from evalframe.errors import ConfigError
from evalframe.redaction import redact, redact_overrides
from evalframe.results import ItemResult, Objective, ScoreResult, StepResult, Usage, to_jsonable

RESULTS = "results.jsonl"
MANIFEST = "run.json"
# Keys that do not change what a run computes: a run may be resumed or re-logged with other values.
_NOT_FINGERPRINTED = (
    *("resume", "log_run", "tracking", "concurrency", "cache", "gate", "max_unscored_rate", "objective"),
    *("window", "keep_items", "raw_reply_limit"),
)


def fingerprint(config: dict[str, Any]) -> str:
    """What makes two runs the same computation (secrets blanked: a resumed run may rotate its key)."""
    config = redact(config)
    essential = {k: v for k, v in config.items() if k not in _NOT_FINGERPRINTED}
    return hashlib.sha256(json.dumps(essential, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _step(d: dict[str, Any]) -> StepResult:
    return StepResult(**{**d, "usage": Usage(**d.get("usage") or {})})


def item_from_json(d: dict[str, Any]) -> ItemResult:
    scores = {
        name: ScoreResult(
            score=float("nan") if r["score"] is None else r["score"],
            reason=r["reason"],
            steps=[_step(s) for s in r.get("steps", [])],
            details=r.get("details") or {},
            error=r.get("error"),
        )
        for name, r in d.get("scores", {}).items()
    }
    target = d.get("target_step")
    return ItemResult(
        id=d["id"],
        input=d["input"],
        ground_truth=d.get("ground_truth"),
        output=d["output"],
        scores=scores,
        target_step=_step(target) if target else None,
        target_error=d.get("target_error"),
        human=d.get("human"),
        record=d.get("record") or {},
    )


def read_items(path: Path) -> list[ItemResult]:
    """Finished items of a results file; a line torn by a kill mid-write is ignored (it is redone)."""
    items: dict[str, ItemResult] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                item = item_from_json(json.loads(line))
            except (ValueError, KeyError, TypeError):
                continue
            items[item.id] = item
    return list(items.values())


class Journal:
    def __init__(self, directory: Path):
        self.directory = directory
        self.path = directory / RESULTS
        self._file: TextIO | None = None

    @property
    def manifest(self) -> dict[str, Any]:
        path = self.directory / MANIFEST
        return json.loads(path.read_text()) if path.is_file() else {}

    def start(
        self, config: dict[str, Any], total: int, resume: bool = False, overrides: list[str] | None = None
    ) -> None:
        """Begin (or, with resume, continue) the run's record."""
        self.directory.mkdir(parents=True, exist_ok=True)
        safe = redact(config)  # the manifest is a file on disk like any other: no secrets in it
        self._write_manifest(
            {
                "status": "running",
                "fingerprint": fingerprint(safe),
                "total": total,
                "config": safe,
                "overrides": redact_overrides(overrides or []),
            }
        )
        # Line-buffered: every finished item reaches the OS as soon as it is written, so SIGKILL
        # cannot lose it.
        self._file = self.path.open("a" if resume else "w", encoding="utf-8", buffering=1)

    def append(self, item: ItemResult) -> None:
        assert self._file is not None, "start() the journal first"
        self._file.write(json.dumps(to_jsonable(item), ensure_ascii=False) + "\n")

    def finish(self, means: dict[str, float] | None = None, objective: Objective | None = None) -> None:
        """Mark the run finished; `means` per scorer and the objective ({"metric", "value", "direction"})
        feed the table printed at the end of a sweep, and the sweep's charts."""
        if self._file:
            self._file.close()
            self._file = None
        record = {**self.manifest, "status": "finished", "means": means or {}}
        if objective is not None:
            record["objective"] = objective.to_json()
        self._write_manifest(record)

    def close(self) -> None:
        if self._file:
            self._file.close()
            self._file = None

    def _write_manifest(self, manifest: dict[str, Any]) -> None:
        tmp = self.directory / f".{MANIFEST}.tmp"
        tmp.write_text(json.dumps(manifest, indent=1, default=str))
        os.replace(tmp, self.directory / MANIFEST)  # atomic: a kill never leaves half a manifest


def find_resumable(outputs: Path, config: dict[str, Any]) -> Path | None:
    """The newest unfinished run under `outputs` with the same fingerprint as `config`."""
    wanted = fingerprint(config)
    manifests = sorted(outputs.rglob(MANIFEST), key=lambda p: p.stat().st_mtime, reverse=True)
    for path in manifests:
        manifest = json.loads(path.read_text())
        if manifest.get("status") == "running" and manifest.get("fingerprint") == wanted:
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
    if not manifest:
        raise ConfigError(f"resume={resume}: {directory} holds no evalframe run ({MANIFEST} is missing)")
    if manifest.get("fingerprint") != fingerprint(config):
        raise ConfigError(
            f"resume={resume}: that run used a different dataset, target, scorer or model configuration; "
            "resume it with the same overrides it was started with"
        )
    return directory
