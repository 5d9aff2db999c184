"""The requests on the wire stay what they are, byte for byte, whatever path the model door takes to send
them: each preset's judge requests (structured output) and a free-text request, recorded by the fake
server and compared with the golden files in tests/models/wire/ (the bodies as sent, and the headers that
carry meaning to the provider: the key, the API version and beta, the content type).

After a deliberate change of what is sent: `python -m tests.models.test_wire_bodies` writes them anew.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import pytest

from evalframe.models.cache import Cache
from evalframe.models.llm import LLM
from evalframe.models.settings import ModelSettings
from evalframe.models.steps import Stats
from evalframe.run import pipeline
from tests.conftest import compose, fake_model
from tests.fake_judge import judge
from tests.testserver import FakeLLMServer

GOLDEN = Path(__file__).parent / "wire"
PRESETS = ("gpt", "claude", "gemini", "ollama", "local")
HEADERS = ("content-type", "authorization", "x-api-key", "anthropic-version", "anthropic-beta")


def wire(server: FakeLLMServer, option: str, work: Path) -> str:
    """The requests of a 3-row answer_similarity run and one free-text request on preset `option`, in
    the order of their bodies (concurrent requests arrive in any order)."""
    server.reset()
    overrides = ["scorer=answer_similarity", *fake_model(server, option), "tracking=none", "cache.mode=off"]
    config = compose([*overrides, "dataset.limit=3"])
    result, _ = pipeline.evaluate(config, work / option)
    assert result.summaries["answer_similarity"].scored == 3
    llm = LLM(ModelSettings.from_config(config["model"]), asyncio.Semaphore(4), Cache("off"), Stats())
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello."}]
    assert asyncio.run(llm.text("target", messages)).error is None
    requests = sorted(server.requests, key=lambda r: r.raw)
    assert sum(r.schema is None for r in requests) == 1 < len(requests)  # the free text, the judge's
    shown = []
    for r in requests:
        headers = "".join(f"{k}: {r.headers[k]}\n" for k in HEADERS if k in r.headers)
        shown.append(f"POST {r.path}\n{headers}{r.raw.decode()}\n")
    return "\n".join(shown)


@pytest.mark.parametrize("option", PRESETS)
def test_the_requests_on_the_wire_are_byte_for_byte_the_golden_ones(
    option: str, judge_server: FakeLLMServer, tmp_path: Path
) -> None:
    golden = (GOLDEN / f"{option}.txt").read_text()
    assert wire(judge_server, option, tmp_path) == golden


if __name__ == "__main__":
    GOLDEN.mkdir(exist_ok=True)
    with FakeLLMServer(responder=judge) as server, tempfile.TemporaryDirectory() as tmp:
        for preset in PRESETS:
            (GOLDEN / f"{preset}.txt").write_text(wire(server, preset, Path(tmp)))
            print(f"wrote {GOLDEN / preset}.txt")
