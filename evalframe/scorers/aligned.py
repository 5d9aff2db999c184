"""An aligned judge as data: a scorer YAML and its prompt files, written by `evalframe align` into a
directory that `hydra.searchpath=[file://DIR]` takes, so `scorer=NAME_aligned` runs like any judge.

    DIR/scorer/NAME_aligned.yaml      the judge's config, copied, its prompt pointing at:
    DIR/prompts/NAME_aligned/
        aligned.j2                    includes guidelines.j2, examples.j2, then the judge's own prompt
        guidelines.j2                 the rules learnt from people (align.method=guidelines or both)
        examples.j2                   the examples as text: item, people's verdict and comment
        <the judge's prompt files>    copied from its folder (*.j2 and the like: what it includes)

Everything is text to review in a pull request. The examples' item texts are fenced as the judged
item is (prompts.fence), under EXAMPLE_* labels (results.alignment reads them back from recorded
prompts), and wrapped in {% raw %}: an answer that holds `{{ ... }}` stays text, never template code.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalframe.errors import ConfigError
from evalframe.results.alignment import EXAMPLE_HEADING, EXAMPLE_LABELS, SUFFIX, Example
from evalframe.scorers.judge import _prompt_path
from evalframe.scorers.prompts import fence

ENTRY = "aligned.j2"
EXAMPLES = "examples.j2"
GUIDELINES = "guidelines.j2"
TEMPLATE_SUFFIXES = (".j2", ".jinja", ".jinja2", ".txt", ".md")  # the prompt folder's files copied
POOL = "examples.jsonl"  # the labelled items examples are retrieved from (align.retrieve)
_CARRIED = ("model", "repeats")  # the run's judge settings, as every judge takes them (judge_base)


def aligned_name(name: str) -> str:
    return f"{name}{SUFFIX}"


def check_alignable(name: str, spec: Mapping[str, Any]) -> None:
    """A judge `align` can rewrite: evalframe.scorers.judge.Judge with one prompt file and an output
    form judged in one call (choice, number, verdicts)."""
    if spec.get("_target_") != "evalframe.scorers.judge.Judge":
        raise ConfigError(
            f"align: scorer {name} is not a judge written as data (_target_: evalframe.scorers.judge.Judge); "
            "align a judge like factuality or your own (README: Your own judge, as data)"
        )
    kind = (spec.get("output") or {}).get("type")
    if not isinstance(spec.get("prompt"), str) or kind not in ("choice", "number", "verdicts"):
        raise ConfigError(
            f"align: scorer {name} is judged in steps (output type {kind}); align takes a judge of one "
            "prompt file with output type choice, number or verdicts"
        )


def verdict_words(output: Mapping[str, Any], normalized: float, human: float) -> str:
    """People's verdict in the judge's own words: the choice whose score is nearest, or the rating."""
    kind = output.get("type")
    if kind == "choice":
        choices = {str(k): float(v) for k, v in (output.get("choices") or {}).items()}
        nearest = min(choices, key=lambda c: abs(choices[c] - normalized))
        return f"{nearest} (score {normalized:g})"
    if kind == "number":
        low, high = float(output["min"]), float(output["max"])
        return f"rating {low + normalized * (high - low):g} (on {low:g} to {high:g})"
    return f"score {normalized:g} (people's {human:g})"


def _raw(text: str) -> str:
    """Literal text in a template: a {% raw %} block, split before every `{%` so that no `{% endraw %}`
    in the text can end it."""
    return "{% raw %}" + text.replace("{%", "{% endraw %}{{ '{%' }}{% raw %}") + "{% endraw %}"


def _note(note: str) -> str:
    return "{#- " + note.replace("#}", "# }") + " -#}"


def guidelines_text(rules: Sequence[str], note: str) -> str:
    lines = [_note(note), "The team's rules, learnt from people's verdicts: apply them as written."]
    return "\n".join([*lines, _raw("\n".join(f"- {rule}" for rule in rules)), ""]) + "\n"


def examples_text(examples: Sequence[Example], output: Mapping[str, Any], note: str) -> str:
    if not examples:
        return _note(note) + "\n"
    lines = [
        _note(note),
        "How people on the team judged some earlier items. They know the team's rules: judge the item "
        "below as they would.",
        "",
    ]
    for number, example in enumerate(examples, 1):
        lines.append(f"{EXAMPLE_HEADING}{number}")
        body = []
        for key, heading in (("input", "Input"), ("ground_truth", "Expected answer"), ("output", "Output")):
            value = getattr(example, key)
            if value is not None and (value != "" or key == "output"):
                body.append(f"{heading}:\n{fence(value, EXAMPLE_LABELS[key])}")
        body.append(f"People's verdict: {verdict_words(output, example.normalized, example.human)}")
        if example.comment:
            body.append(f"People's comment: {example.comment}")
        lines += [_raw("\n".join(body)), ""]
    lines.append("Now the item to judge.")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Retrieved:
    """Examples retrieved per judged item (align.retrieve=K) from `pool` by the embedding model."""

    pool: Sequence[Example]
    k: int
    embedding: str = "local/all-MiniLM-L6-v2"


# The examples.j2 of retrieved examples: the judged item's nearest, given as `examples` (scorers.retrieval)
RETRIEVED_TEMPLATE = """{% if examples %}How people on the team judged the earlier items most like this one.
They know the team's rules: judge the item below as they would.
{% for e in examples %}
HEADING{{ loop.index }}
{% if e.input %}Input:
{{ e.input | fence("INPUT_LABEL") }}
{% endif %}{% if e.ground_truth %}Expected answer:
{{ e.ground_truth | fence("TRUTH_LABEL") }}
{% endif %}Output:
{{ e.output | fence("OUTPUT_LABEL") }}
People's verdict: {{ e.verdict }}
{% if e.comment %}People's comment: {{ e.comment }}
{% endif %}{% endfor %}
Now the item to judge.
{% endif %}"""


def _retrieved(folder: Path, retrieved: Retrieved, output: Mapping[str, Any], note: str) -> dict[str, Any]:
    """examples.jsonl (the pool) and the examples.j2 that shows an item's nearest; the YAML's option."""
    pool = folder / POOL
    lines = [
        {
            "id": e.id,
            "input": e.input,
            "ground_truth": e.ground_truth,
            "output": e.output,
            "verdict": verdict_words(output, e.normalized, e.human),
            "comment": e.comment,
        }
        for e in retrieved.pool
    ]
    pool.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
    template = RETRIEVED_TEMPLATE.replace("HEADING", EXAMPLE_HEADING)
    for key, label in (("INPUT", "input"), ("TRUTH", "ground_truth"), ("OUTPUT", "output")):
        template = template.replace(f"{key}_LABEL", EXAMPLE_LABELS[label])
    (folder / EXAMPLES).write_text(_note(note) + "\n" + template, encoding="utf-8")
    return {"file": str(pool), "retrieve": retrieved.k, "embedding": {"name": retrieved.embedding}}


def _contents(folder: Path) -> str:
    """A comment naming the digest of every file the entry prompt includes: a judge's verdict digest
    reads its prompt file's text (Scorer.identity), so other examples or rules make other verdicts."""
    digest = hashlib.sha256()
    for file in sorted(p for p in folder.iterdir() if p.is_file()):
        digest.update(file.name.encode() + b"\0" + file.read_bytes())
    return f"{{#- the files it includes: sha256 {digest.hexdigest()[:16]} -#}}\n"


def write(
    out: Path,
    name: str,
    spec: Mapping[str, Any],
    examples: Sequence[Example],
    note: str,
    guidelines: Sequence[str] = (),
    retrieved: Retrieved | None = None,
) -> Path:
    """Write the aligned judge of scorer `name` (its resolved config `spec`) into `out`; returns the
    YAML's path. Paths in the YAML are `out` as given: a relative `out` is read from the directory
    the aligned judge runs in, as `hydra.searchpath=[file://OUT]` is."""
    check_alignable(name, spec)
    new = aligned_name(name)
    original = _prompt_path(str(spec["prompt"])).resolve()
    folder = out / "prompts" / new
    if folder.exists():
        shutil.rmtree(folder)  # the previous alignment's files: stale examples must not stay behind
    folder.mkdir(parents=True)
    # The prompt files of its folder only (what the prompt can include), not the folder: a prompt kept in
    # the working directory would otherwise bring outputs/ and `out` itself along.
    for file in original.parent.iterdir():
        if file.is_file() and file.suffix in TEMPLATE_SUFFIXES:
            shutil.copy2(file, folder / file.name)
    if any((folder / f).exists() for f in (ENTRY, EXAMPLES, GUIDELINES, POOL)):
        raise ConfigError(
            f"align: the prompt folder {original.parent} has a file named {ENTRY}, {EXAMPLES} or {GUIDELINES}"
        )
    includes = [GUIDELINES] if guidelines else []
    if guidelines:
        (folder / GUIDELINES).write_text(guidelines_text(guidelines, note), encoding="utf-8")
    option = None
    if retrieved is not None:
        option = _retrieved(folder, retrieved, spec["output"], note)
        includes.append(EXAMPLES)
    elif examples or not guidelines:
        (folder / EXAMPLES).write_text(examples_text(examples, spec["output"], note), encoding="utf-8")
        includes.append(EXAMPLES)
    entry = "\n\n".join(f'{{% include "{f}" %}}' for f in [*includes, original.name])
    (folder / ENTRY).write_text(_contents(folder) + entry + "\n", encoding="utf-8")
    config = {k: v for k, v in spec.items() if k not in _CARRIED and not k.startswith("_")}
    if config.get("models") is None:
        config.pop("models", None)  # the run's, from judge_base, unless the judge had a panel of its own
    config["prompt"] = str(folder / ENTRY)
    if option is not None:
        config["examples"] = option
    if spec.get("system"):
        system = _prompt_path(str(spec["system"])).resolve()
        config["system"] = str(folder / system.name) if system.parent == original.parent else str(system)
    yaml = out / "scorer" / f"{new}.yaml"
    yaml.parent.mkdir(parents=True, exist_ok=True)
    yaml.write_text(_yaml(new, name, spec["_target_"], config), encoding="utf-8")
    return yaml


def _yaml(new: str, name: str, target: str, config: Mapping[str, Any]) -> str:
    from omegaconf import OmegaConf

    body = OmegaConf.to_yaml(OmegaConf.create({"_target_": target, **config}))
    return (
        f"# @package scorers.{new}\n"
        f"# The judge {name}, aligned with people's labels by `evalframe align` (what it learnt is in\n"
        f"# prompts/{new}/). Run it with: hydra.searchpath=[file://DIR] scorer={new}\n"
        "defaults:\n"
        "  - /judge_base@_here_   # model, models, repeats: the run's, as every judge's\n"
        "  - _self_\n\n" + body
    )
