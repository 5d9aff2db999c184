"""Examples retrieved per judged item: a judge's `examples:` option (what `evalframe align
align.retrieve=K` writes). A file of labelled items (JSON lines: input, ground_truth, output, verdict,
comment), and for each judged item the K most like it (the cosine of input and output under an
embedding model, served by the run's cache like every embedding) go to its prompt as the variable
`examples`, nearest first:

    examples: {file: aligned/prompts/NAME_aligned/examples.jsonl, retrieve: 4,
               embedding: {name: local/all-MiniLM-L6-v2}}
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalframe.data.rows import Row
from evalframe.errors import ConfigError
from evalframe.models.context import Context
from evalframe.models.settings import ModelSettings

KEYS = {"file", "retrieve", "embedding"}
FIELDS = ("input", "ground_truth", "output", "verdict", "comment")


def _text(input: str | None, output: str | None) -> str:
    """What is compared: an item's input and output."""
    return f"{input or ''}\n{output or ''}"


@dataclass(frozen=True)
class Retrieval:
    file: Path
    k: int
    embedder: ModelSettings
    pool: tuple[Mapping[str, Any], ...]

    @classmethod
    def of(cls, spec: Mapping[str, Any], key: str) -> Retrieval:
        """The option as configured; each mistake names the key to fix, before any call."""
        unknown = sorted(set(spec) - KEYS)
        if unknown:
            raise ConfigError(f"{key}: unknown key(s) {unknown}; it takes {sorted(KEYS)}")
        k = spec.get("retrieve")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError(f"{key}.retrieve={k!r}: give the number of examples per item, e.g. 4")
        file = Path(str(spec.get("file") or "")).expanduser()
        try:
            lines = file.read_text(encoding="utf-8").splitlines()
            pool = tuple(json.loads(line) for line in lines if line.strip())
        except (OSError, ValueError) as e:
            raise ConfigError(f"{key}.file={file}: cannot read its examples ({e})") from None
        if not pool or not all(isinstance(e, dict) and "output" in e and "verdict" in e for e in pool):
            raise ConfigError(f"{key}.file={file}: every line must be an example with output and verdict")
        embedding = dict(spec.get("embedding") or {"name": "local/all-MiniLM-L6-v2"})
        embedder = ModelSettings.from_config(embedding, f"{key}.embedding")
        return cls(file, k, embedder, tuple({f: e.get(f) for f in FIELDS} for e in pool))

    def text(self) -> str:
        """What the judge's verdicts depend on beyond its prompt files: the examples and their count."""
        return f"retrieve {self.k} of\n{self.file.read_text(encoding='utf-8', errors='replace')}"

    async def nearest(self, row: Row, output: str, ctx: Context) -> list[Mapping[str, Any]] | str:
        """The `k` examples nearest the item, nearest first; or why there are none (a failed embedding)."""
        mine = _text(row.input, output)
        pairs = [(mine, _text(e["input"], e["output"])) for e in self.pool]
        steps = await ctx.llm(self.embedder).cosines(pairs)
        failed = next((s for s in steps if not s.ok or s.reply is None), None)
        if failed is not None:
            return f"examples: {failed.error}"
        cosines = [float(s.reply["cosine"]) for s in steps if s.reply is not None]
        ranked = sorted(range(len(self.pool)), key=lambda i: (-cosines[i], i))
        return [self.pool[i] for i in ranked[: self.k]]
