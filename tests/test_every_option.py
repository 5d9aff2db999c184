"""Every option of every config group composes, resolves (values checked) and builds its objects, as
a run would before its first model call; each scorer also in a panel with repeats=3, and each sweep
preset names keys the config has. The options are read from conf/: a new file is tested as it lands.
In process, no model call."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import pytest
from hydra.utils import get_class

from evalframe.config.compose import compose, resolve
from evalframe.errors import ConfigError
from evalframe.paths import CONF_DIR
from evalframe.results.objective import of_config
from evalframe.run import planning
from evalframe.scorers.base import JudgeScorer, Scorer
from evalframe.targets import Target


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


GROUPS = sorted(p.name for p in CONF_DIR.iterdir() if p.is_dir())
# Scorers and sweeps have tests of their own below; every other group meets every scorer at once.
CHOICES = [f"{g}={o}" for g in GROUPS if g not in ("scorer", "sweep") for o in options(g)]
EVERY_SCORER = f"scorer=[{','.join(options('scorer'))}]"

# The keys an option leaves `???` for the user, with the example values of its own comment.
NEEDS = {
    "dataset=csv": ["dataset.path=data/qa.csv"],
    "dataset=jsonl": ["dataset.path=data/qa.jsonl"],
    "dataset=json": ["dataset.path=data/qa.json"],
    "target=http": ["target.url=http://127.0.0.1:8000/answer"],
    "target=python": ["target.fn=string:capwords"],  # any importable function of one argument
}
# What each sweep preset's comment runs it with: the scorer whose weights it sweeps, and for tuning to
# people a dataset with their scores.
SWEEP_WITH = {
    "penalties_grid": ["scorer=answer_similarity"],
    "tune_penalties": ["scorer=answer_similarity", "dataset=sas_squad"],
}
EMBEDDERS = ["local/all-MiniLM-L6-v2", "openai/text-embedding-3-small"]  # README's semantic_similarity


def built(spec: dict[str, Any], where: str, kind: type) -> Any:
    """The object the run would build from `spec` (run.planning.build: get_class + kwargs), checked to be
    the class its `_target_` names."""
    made = planning.build(spec, where)
    assert type(made) is get_class(spec["_target_"]) and isinstance(made, kind), where
    return made


@pytest.mark.parametrize("choice", CHOICES)
def test_each_option_builds_with_every_scorer(choice: str) -> None:
    config = resolve(compose([choice, EVERY_SCORER, *NEEDS.get(choice, [])]))
    built(config["target"], "target", Target)
    scorers = {name: built(spec, f"scorers.{name}", Scorer) for name, spec in config["scorers"].items()}
    assert list(scorers) == options("scorer")
    # The model and the penalty weights reach the scorers that use them.
    judge = config["model"]["name"]
    assert all(s.models()[0].name == judge for s in scorers.values() if isinstance(s, JudgeScorer))
    assert dict(scorers["answer_similarity"].penalties) == config["penalties"]


@pytest.mark.parametrize("choice", sorted(NEEDS))
def test_an_option_without_its_required_key_says_which(choice: str) -> None:
    key = NEEDS[choice][0].partition("=")[0]
    with pytest.raises(ConfigError, match=rf"^{key} is required: set it on the command line"):
        resolve(compose([choice]))


@pytest.mark.parametrize("option", options("scorer"))
def test_each_scorer_builds_alone_in_a_panel_and_repeated(option: str) -> None:
    chosen = [f"scorer={option}"]
    alone = resolve(compose(chosen))["scorers"]
    assert list(alone) == [option]
    scorer = built(alone[option], option, Scorer)
    repeated = [*chosen, "repeats=3"]
    if "model" in alone[option]:  # an LLM judge: a panel of two presets, each judgment asked 3 times
        assert isinstance(scorer, JudgeScorer) and len(scorer.models()) == 1 and scorer.panel.repeats == 1
        config = resolve(compose([*repeated, f"scorers.{option}.models=[gpt,claude]"]))
        panel = built(config["scorers"][option], option, JudgeScorer).panel
        assert [j.label for j in panel.judges] == ["gpt", "claude"] and panel.repeats == 3
        assert [m.name.split("/")[0] for m in panel.models()] == ["openai", "anthropic"]
        # repeats reach a judge through its `repeats: ${repeats}`: without it, refused rather than ignored
        with pytest.raises(ConfigError, match=rf"scorers\.{option} has no repeats key"):
            resolve(compose([*repeated, f"~scorers.{option}.repeats"]))
    elif "models" in alone[option]:  # embeddings: a panel of embedding models (no judgment to repeat)
        config = resolve(compose([*repeated, f"scorers.{option}.models=[{','.join(EMBEDDERS)}]"]))
        assert [m.name for m in built(config["scorers"][option], option, Scorer).embedders] == EMBEDDERS
    else:  # no model call: repeats change nothing, and a panel is refused, naming the key
        built(resolve(compose(repeated))["scorers"][option], option, Scorer)
        with pytest.raises(ConfigError, match=rf"Could not override 'scorers\.{option}\.models'"):
            compose([*chosen, f"scorers.{option}.models=[gpt,claude]"])


def _hydra_node(overrides: list[str]) -> Any:
    """The `hydra` node a -m run would get (evalframe's compose leaves it out)."""
    from hydra import compose as hydra_compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return hydra_compose("config", overrides, return_hydra_config=True).hydra


def _targets(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        yield from [node["_target_"]] if "_target_" in node else []
        for value in node.values():
            yield from _targets(value)


@pytest.mark.parametrize("option", options("sweep"))
def test_each_sweep_preset_sweeps_keys_the_config_has(option: str) -> None:
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import IntervalSweep
    from omegaconf import OmegaConf

    overrides = [f"sweep={option}", *SWEEP_WITH.get(option, [])]
    of_config(resolve(compose(overrides)))  # the objective it ranks the jobs by is one this run has
    hydra = OmegaConf.to_container(_hydra_node(overrides))
    assert isinstance(hydra, dict)
    for target in _targets({"sweeper": hydra["sweeper"], "callbacks": hydra["callbacks"]}):
        get_class(target)  # the sweeper plugin, its sampler and evalframe's callback are importable
    params = hydra["sweeper"]["params"]
    assert params
    for key, values in params.items():
        sweep = OverridesParser.create().parse_override(f"{key}={values}")
        assert sweep.is_sweep_override(), key
        value = sweep.value()
        # Every job's value composes and passes the checks (an interval: both ends).
        each = [value.start, value.end] if isinstance(value, IntervalSweep) else list(sweep.sweep_iterator())
        for v in each:
            config = resolve(compose([*overrides, f"{key}={v}"]))
            assert functools.reduce(lambda node, part: node[part], key.split("."), config) == v, key


def test_tuning_to_people_is_refused_on_a_dataset_without_their_scores() -> None:
    config = resolve(compose(["sweep=tune_penalties", "scorer=answer_similarity"]))
    with pytest.raises(ConfigError, match="compares with human scores, but the dataset has none"):
        of_config(config)
