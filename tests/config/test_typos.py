"""Typos on the command line: one line naming the key and the nearest valid names, exit code 2,
nothing run (no run directory, no MLflow store), before Hydra composes anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalframe.config import typos
from evalframe.errors import ConfigError
from tests.conftest import run_cli


@pytest.mark.parametrize(
    ("typed", "said"),
    [
        # Before: Hydra added the key, ran the default job and exited 0, with no warning.
        (
            "+datset=chat_sample",
            "+datset=chat_sample: datset is not a key of the config; did you mean dataset=chat_sample?",
        ),
        # Before: Hydra suggested adding it with +, which then ran as above.
        (
            "datset=chat_sample",
            "datset=chat_sample: datset is not a key of the config; did you mean dataset=chat_sample?",
        ),
        ("concurency=4", "concurency=4: concurency is not a key of the config; did you mean concurrency=4?"),
        # Before: the options among Hydra's internal lines, no "did you mean".
        (
            "scorer=answer_similarty",
            "scorer=answer_similarty: scorer has no option 'answer_similarty'; "
            "did you mean scorer=answer_similarity?",
        ),
    ],
)
def test_a_typo_is_one_line_with_the_nearest_names_and_nothing_runs(
    tmp_path: Path, typed: str, said: str
) -> None:
    done = run_cli(["scorer=exact_match", typed], cwd=tmp_path)  # exact_match: before, it ran in seconds
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines() == [f"error: {said}"]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["-m", "scorer=answer_similarity,factuallity"], "did you mean scorer=answer_similarity,factuality?"),
        (["scorer=[token_f1,exact_mach]"], "did you mean scorer=[token_f1,exact_match]?"),
        (["model@target.model=claud"], "did you mean model@target.model=claude?"),
        (["+gat.min_score.token_f1=0.8"], "did you mean +gate.min_score.token_f1=0.8?"),
        (["model=gtp"], "did you mean model=gpt?"),
        # A key under a known one. Before: Hydra's five lines (`Key 'mising' is not in struct`), no name.
        (["penalties.mising=0.1"], "penalties has no key 'mising'; did you mean penalties.missing=0.1?"),
        (["model.nme=openai/gpt-4o"], "did you mean model.name=openai/gpt-4o?"),  # a group's own key
        (["model.api_bse=http://x"], "did you mean model.api_base=http://x?"),  # one from model_base.yaml
        (["dataset.columns.inptu=question"], "did you mean dataset.columns.input=question?"),
        (["-m", "watch.evry=1s,5s"], "did you mean watch.every=1s,5s?"),
        (
            ["model=nothing_near"],
            "model has no option 'nothing_near' (options: claude, gemini, gpt, local, ollama",
        ),
    ],
)
def test_the_suggestion_is_the_line_as_typed_with_the_name_put_right(argv: list[str], said: str) -> None:
    with pytest.raises(ConfigError, match=r"^\S+: ") as raised:
        typos.check(argv)
    assert said in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.parametrize(
    "argv",
    [
        ["+extra_key=null", "+gate.min_score.answer_similarity=0.8", "+model.extra.seed=1"],  # new keys
        ["+hydra.launcher.ray.init.num_cpus=2", "hydra/launcher=ray", "~tracking", "sweep=null"],
        ["-m", "scorer=glob(*)", "penalties.missing=0.05,0.3", "model.name=openai/gpt-4o"],
        ["-cd", "my_conf", "dataset=my_data"],  # a config of the user's own: its options are Hydra's to judge
        ["scorer=exact_match", "--cfg", "job"],
        ["target=llm", "target.model.name=x", "dataset.human_score=h", "model.extra.seed=1"],
        ["cache.mode=read", "watch.every=1s"],
        ["penalties.nothing_like_a_key=1"],  # near nothing: Hydra's own refusal says it
    ],
)
def test_what_is_right_or_the_users_own_passes(argv: list[str]) -> None:
    typos.check(argv)
