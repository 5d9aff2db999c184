"""A model string LiteLLM cannot place is a config error naming the key and the nearest providers,
found before any call: before, every call failed with LiteLLM's "LLM Provider NOT provided" and the
run ended with exit code 4."""

from __future__ import annotations

from pathlib import Path

import litellm
import pytest

from evalframe.errors import ConfigError
from evalframe.models import providers
from evalframe.models.settings import ModelSettings
from tests.conftest import run_cli
from tests.scripted import NAME, PROVIDER, ScriptedModel
from tests.testserver import FakeLLMServer


def test_a_providers_typo_on_the_command_line_stops_the_run_before_any_call(
    tmp_path: Path, judge_server: FakeLLMServer
) -> None:
    done = run_cli(
        ["scorer=answer_similarity", "model.name=opnai/gpt-4o", f"model.api_base={judge_server.openai_base}"],
        cwd=tmp_path,
        env={"OPENAI_API_KEY": "sk-test"},
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines() == [
        "error: model.name=opnai/gpt-4o: 'opnai' is not one of LiteLLM's providers; "
        "did you mean openai/gpt-4o?"
    ]
    assert judge_server.count() == 0
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "outputs").exists()


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("antropic/claude-3-5-haiku", "did you mean anthropic/claude-3-5-haiku?"),
        ("gpt4o", "model.name=gpt4o: LiteLLM cannot tell its provider; write it as PROVIDER/MODEL"),
        (
            "no_such_provider/x",
            "'no_such_provider' is not one of LiteLLM's providers; write it as PROVIDER/MODEL",
        ),
    ],
)
def test_the_error_names_the_key_and_the_nearest_providers(name: str, said: str) -> None:
    with pytest.raises(ConfigError) as raised:
        ModelSettings(name=name).check_credentials()
    assert said in str(raised.value) and "\n" not in str(raised.value)


def test_the_target_models_key_is_named() -> None:
    with pytest.raises(ConfigError, match=r"^target\.model\.name=opnai/x: .*did you mean openai/x\?"):
        ModelSettings(name="opnai/x").check_credentials("target.model")


@pytest.mark.parametrize(
    "name", ["openai/gpt-4o-mini", "gpt-4o", "ollama_chat/llama3", "local/all-MiniLM-L6-v2"]
)
def test_what_litellm_places_passes(name: str) -> None:
    providers.check(name, None)


def test_a_custom_provider_counts_once_registered_and_not_before(
    scripted: ScriptedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    providers.check(NAME, None)  # the tests' scripted judge: registered with LiteLLM as a custom provider
    # Registered in custom_provider_map only (custom_llm_setup() not called yet): it counts.
    mine = {"provider": "my_judge", "custom_handler": object()}
    monkeypatch.setattr(litellm, "custom_provider_map", [*litellm.custom_provider_map, mine])
    providers.check("my_judge/v1", None)
    # `scripted/judge` typed on the command line, where nothing registered it: a config error.
    monkeypatch.setattr(
        litellm, "custom_provider_map", [p for p in litellm.custom_provider_map if p["provider"] != PROVIDER]
    )
    monkeypatch.setattr(litellm, "provider_list", [p for p in litellm.provider_list if p != PROVIDER])
    with pytest.raises(
        ConfigError, match=f"model.name={NAME}: '{PROVIDER}' is not one of LiteLLM's providers"
    ):
        providers.check(NAME, None)
