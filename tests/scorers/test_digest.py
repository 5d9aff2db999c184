"""A verdict's digest (evalframe.scorers.digest) changes with what a verdict depends on, and with
nothing else: composed configs, the scorers the run builds, no model call."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from evalframe.config.compose import compose, resolve
from evalframe.paths import PROMPTS_DIR
from evalframe.run import planning
from evalframe.scorers import digest

BASE = ["scorer=[answer_similarity,faithfulness,exact_match]", "model=gpt"]


def digests(*overrides: str) -> dict[str, str]:
    config = resolve(compose([*BASE, *overrides]))
    scorers = {name: planning.build(spec, f"scorers.{name}") for name, spec in config["scorers"].items()}
    return digest.digests(config, scorers)


def changed(*overrides: str) -> set[str]:
    """The scorers whose digest `overrides` change."""
    before, after = digests(), digests(*overrides)
    return {name for name in before if before[name] != after[name]}


@pytest.mark.parametrize(
    ("overrides", "which"),
    [
        (["penalties.missing=0.3"], {"answer_similarity"}),
        (["penalties=strict"], {"answer_similarity"}),
        (["scorers.faithfulness.output.verdicts.not_found=0.5"], {"faithfulness"}),
        (["scorers.faithfulness.empty=0"], {"faithfulness"}),
        (["model=claude"], {"answer_similarity", "faithfulness"}),
        (["model.temperature=0.7"], {"answer_similarity", "faithfulness"}),
        (["+model.extra.seed=3"], {"answer_similarity", "faithfulness"}),
        (["reason=llm"], {"answer_similarity"}),
        (["repeats=3"], {"answer_similarity", "faithfulness"}),
        (["scorers.faithfulness.models=[gpt,claude]"], {"faithfulness"}),
        (["target=llm"], {"answer_similarity", "faithfulness", "exact_match"}),  # what produced the output
        (["dataset.columns.output=answer"], {"answer_similarity", "faithfulness", "exact_match"}),
    ],
)
def test_what_a_verdict_depends_on_changes_the_digest_of_that_scorer_only(
    overrides: list[str], which: set[str]
) -> None:
    assert changed(*overrides) == which


@pytest.mark.parametrize(
    "overrides",
    [
        ["concurrency=32", "window=10", "keep_items=5", "max_judgments=null"],
        ["cache.mode=off", "cache.dir=/elsewhere"],
        ["tracking=none", "tracking.run_name=mine", "resume=true"],
        ["dataset=jsonl", "dataset.path=/data/qa.jsonl", "dataset.limit=3"],  # where the rows are
        ["model.api_base=http://127.0.0.1:8000/v1", "model.timeout=5", "model.max_retries=0"],
        ["model.rpm=60", "model.tpm=1000", "model.batch=true", "model.input_cost_per_token=1e-7"],
        ["model.api_key_env=MY_KEY", "model.reply_retries=0", "max_unscored_rate=0.5"],
    ],
)
def test_where_and_how_a_run_goes_leave_every_digest_as_it_is(overrides: list[str]) -> None:
    assert changed(*overrides) == set()


def test_a_prompt_file_counts_by_its_text_not_its_place(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    shutil.copytree(PROMPTS_DIR / "answer_similarity", mine)
    claims = tmp_path / "claims.j2"
    shutil.copy(PROMPTS_DIR / "faithfulness" / "claims.j2", claims)
    moved = [f"scorers.answer_similarity.prompt_dir={mine}", f"scorers.faithfulness.prompt.claims={claims}"]
    assert changed(*moved) == set()
    (mine / "extract.j2").write_text((mine / "extract.j2").read_text() + "\nBe brief.")
    claims.write_text(claims.read_text() + "\nBe brief.")
    assert changed(*moved) == {"answer_similarity", "faithfulness"}


def test_no_credential_reaches_what_is_hashed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_KEY", "sk-live-0123456789")
    overrides = [
        *BASE,
        "model.api_key_env=MY_KEY",
        "model.api_base=https://user:hunter2secret@proxy.example/v1",
        "+model.extra.api_key=sk-extra-987654321",
        "+model.extra.extra_headers.Authorization=Bearer tok-abcdefgh",
    ]
    config = resolve(compose(overrides))
    scorers = {name: planning.build(spec, name) for name, spec in config["scorers"].items()}
    hashed = "".join(digest.payload(config, name, s) for name, s in scorers.items())
    for secret in ("sk-live-0123456789", "hunter2secret", "sk-extra-987654321", "tok-abcdefgh", "MY_KEY"):
        assert secret not in hashed
    # ... and so none changes a digest: a rotated key or another proxy judges the same.
    others = [
        "+model.extra.api_key=other-key-1234",
        "+model.extra.extra_headers.Authorization=Bearer other-5678",
    ]
    rotated: dict[str, Any] = resolve(compose([*overrides[:-2], *others]))
    again = {name: planning.build(spec, name) for name, spec in rotated["scorers"].items()}
    assert digest.digests(rotated, again) == digest.digests(config, scorers)


@pytest.mark.slow
def test_a_digest_is_the_same_in_another_process_for_the_same_settings() -> None:
    # 16 hex digits of SHA-256 over sorted JSON: no id(), no set order, no path of this checkout.
    first = digests()
    assert first == digests() and all(len(d) == 16 and int(d, 16) >= 0 for d in first.values())
    assert "/work" not in digest.payload(
        resolve(compose(BASE)),
        "faithfulness",
        planning.build(resolve(compose(BASE))["scorers"]["faithfulness"], "f"),
    )


def test_a_file_a_prompt_includes_counts_as_the_prompt_does(tmp_path: Path) -> None:
    """The README's own judge ("Your own judge, as data"), its prompt including a rules file that
    imports a macro from a subfolder: editing only an included file changes the verdict's digest
    (the judge reads it as part of its prompt), as editing the prompt does."""
    prompts = tmp_path / "my_prompts"
    (prompts / "parts").mkdir(parents=True)
    (prompts / "polite.j2").write_text(
        "How polite is this reply to a customer's question?\n{% include 'rules.txt' %}\n"
        "Reply:\n{{ output | fence('REPLY') }}\n"
        'Reply with JSON: {"reason": "...", "rating": 1-5}\n'
    )
    (prompts / "rules.txt").write_text("{% from 'parts/scale.j2' import scale %}Rules: {{ scale() }}")
    (prompts / "parts" / "scale.j2").write_text("{% macro scale() %}1 = rude, 5 = very polite{% endmacro %}")
    config = resolve(compose(["scorer=exact_match", "model=gpt"]))
    config["scorers"] = {
        "polite": {  # my_conf/scorer/polite.yaml, as the README writes it
            "_target_": "evalframe.scorers.judge.Judge",
            "prompt": str(prompts / "polite.j2"),
            "system": None,
            "require_ground_truth": False,
            "output": {"type": "number", "min": 1, "max": 5},
            "model": config["model"],
            "repeats": 1,
        }
    }

    def polite(reads: str) -> str:
        judge = planning.build(config["scorers"]["polite"], "scorers.polite")
        [message] = judge.prompts["judge"].render(output="Thanks!", input="q")
        assert f"\nRules: {reads}\nReply:" in message["content"]  # what the judge reads
        return digest.digests(config, {"polite": judge})["polite"]

    first = polite("1 = rude, 5 = very polite")
    assert polite("1 = rude, 5 = very polite") == first
    (prompts / "rules.txt").write_text(
        "{% from 'parts/scale.j2' import scale %}Rules: be strict, {{ scale() }}"
    )
    second = polite("be strict, 1 = rude, 5 = very polite")
    assert second != first
    (prompts / "parts" / "scale.j2").write_text("{% macro scale() %}1 = rude, 5 = kind{% endmacro %}")
    assert polite("be strict, 1 = rude, 5 = kind") not in (first, second)


def test_a_prompt_folder_counts_the_files_of_its_subfolders_it_includes(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    shutil.copytree(PROMPTS_DIR / "answer_similarity", mine)
    (mine / "shared").mkdir()
    (mine / "shared" / "rules.txt").write_text("Count units strictly.")
    (mine / "extract.j2").write_text((mine / "extract.j2").read_text() + "\n{% include 'shared/rules.txt' %}")
    moved = [f"scorers.answer_similarity.prompt_dir={mine}"]
    before = digests(*moved)
    (mine / "shared" / "rules.txt").write_text("Count units leniently.")
    assert digests(*moved)["answer_similarity"] != before["answer_similarity"]
