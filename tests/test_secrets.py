"""Secrets by value: every kind of credential a run is given, and a key that a judge or a target echoes
back, reaches none of the files a run writes (its directory, Hydra's files, MLflow's database and
artifacts, the judge cache) nor the console. A real `python -m evalframe -m ...` against the fake
server, with each secret a unique random string, then a byte search of everything."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from evalframe import redaction
from tests.conftest import run_cli
from tests.fake_judge import judge
from tests.testserver import FakeLLMServer, FakeRequest, Fault


def _secret(kind: str) -> str:
    return f"{kind}{uuid.uuid4().hex[:16]}"


def leaks(root: Path, console: str, secrets: dict[str, str]) -> dict[str, list[str]]:
    """For each secret, the files under `root` (run and sweep directories, mlflow.db, MLflow's
    artifacts, the cache) and "console" that contain it."""
    files = [p for p in root.rglob("*") if p.is_file()]
    found: dict[str, list[str]] = {}
    for kind, value in secrets.items():
        needle = value.encode()
        hits = [str(p.relative_to(root)) for p in files if needle in p.read_bytes()]
        hits += ["console"] if value in console else []
        if hits:
            found[kind] = hits
    return found


def assert_no_leak(root: Path, console: str, secrets: dict[str, str]) -> None:
    found = leaks(root, console, secrets)
    places = sorted({p for hits in found.values() for p in hits})
    assert not found, f"{len(places)} files (or the console) hold a secret: {found}"


def http_target(server: FakeLLMServer, userinfo: str = "") -> list[str]:
    """The fake server's chat endpoint as the system under test (target=http)."""
    base = server.openai_base.replace("http://", f"http://{userinfo}@" if userinfo else "http://")
    return [
        "target=http",
        f"target.url={base}/chat/completions",
        "target.body={messages: [{role: user, content: '{{ input }}'}]}",
        "target.output_path=choices.0.message.content",
    ]


@pytest.mark.slow
def test_every_kind_of_secret_is_blanked_everywhere_in_a_sweep(
    judge_server: FakeLLMServer, tmp_path: Path
) -> None:
    secrets = {k: _secret(k) for k in ("header", "urlpass", "extra", "xtoken", "env", "yamlenv")}
    args = [
        "-m",
        "scorer=answer_similarity",
        "model=gpt",
        f"model.api_base={judge_server.openai_base}",
        "model.timeout=10",
        f"+model.extra.api_key={secrets['extra']}",
        # A password in a URL (LiteLLM's async transport cannot call a judge at such a URL; the target can)
        *http_target(judge_server, f"evaluser:{secrets['urlpass']}"),
        f"+target.headers.Authorization=Bearer {secrets['header']}",
        f"+target.headers.X-Api-Token={secrets['xtoken']}",
        "+tracking.password_env=EVALFRAME_TEST_STORE_PASSWORD",  # any *_env key names a secret
        "dataset.limit=3",
        "penalties.missing=0.1,0.3",  # two jobs
    ]
    env = {"OPENAI_API_KEY": secrets["env"], "EVALFRAME_TEST_STORE_PASSWORD": secrets["yamlenv"]}
    result = run_cli(args, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    [sweep] = tmp_path.glob("multirun/*/*")
    assert (sweep / "multirun.yaml").is_file() and len(list(sweep.glob("*/results.jsonl"))) == 2
    assert (tmp_path / "mlflow.db").is_file() and (tmp_path / "cache").is_dir()
    # the target really got its headers (so they were there to leak)
    sent = [r.headers for r in judge_server.requests if r.schema is None]
    assert sent and all(h["x-api-token"] == secrets["xtoken"] for h in sent)
    assert_no_leak(tmp_path, result.stdout + result.stderr, secrets)
    assert "http://evaluser:***@" in (sweep / "multirun.yaml").read_text()  # blanked, not dropped


def echo_key(request: FakeRequest) -> str | dict | Fault:
    """A judge (and target) that echoes the credential it was sent: into its replies, and into an
    error for the first question's scoring steps."""
    key = request.headers.get("authorization", "")
    if request.schema is None:  # the system under test
        return f"My credentials are {key}."
    if "first" in str(request.messages):
        return Fault(status=400, body=f'{{"error": {{"message": "bad request with {key}"}}}}')
    reply = judge(request)
    if isinstance(reply, dict) and "reason" in reply:
        reply["reason"] = f"Scored with {key}"
    return reply


@pytest.mark.slow
def test_a_key_echoed_back_by_the_judge_or_the_target_is_never_stored(
    judge_server: FakeLLMServer, tmp_path: Path
) -> None:
    judge_server.responder = echo_key
    secrets = {"judge": _secret("judge"), "target": _secret("target")}
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        '{"id": "1", "input": "the first question", "ground_truth": "Paris is the capital of France."}\n'
        '{"id": "2", "input": "another question", "ground_truth": "Paris is the capital of France."}\n'
    )
    args = [
        "scorer=answer_similarity",
        "model=gpt",
        f"model.api_base={judge_server.openai_base}",
        "model.timeout=10",
        "model.max_retries=0",
        "reason=llm",
        "dataset=jsonl",
        f"dataset.path={rows}",
        *http_target(judge_server),
        "target.api_key_env=SERVICE_TOKEN",
    ]
    env = {"OPENAI_API_KEY": secrets["judge"], "SERVICE_TOKEN": secrets["target"]}
    result = run_cli(args, cwd=tmp_path, env=env)
    assert result.returncode in (0, 4), result.stderr
    assert_no_leak(tmp_path, result.stdout + result.stderr, secrets)
    [run] = tmp_path.glob("outputs/*/*")
    stored = (run / "results.jsonl").read_text()
    assert "My credentials are Bearer ***" in stored and "Scored with Bearer ***" in stored
    assert "bad request with Bearer ***" in stored  # the error is kept, its key blanked


def test_secret_values_found_by_what_they_are() -> None:
    redaction.remember(
        {
            "model": {"api_base": "https://me:p%40ss-word@host/v1", "api_key_env": "EVALFRAME_NOT_SET"},
            "target": {
                "headers": {
                    "Authorization": "Basic dXNlcjpwYXNz",
                    "X-Api-Key": "xk-123456",
                    "Cookie": "sid=c00k1e",
                }
            },
        }
    )
    text = redaction.scrub_text(
        "https://me:p%40ss-word@host and p@ss-word, dXNlcjpwYXNz, xk-123456 sid=c00k1e"
    )
    assert text == "https://me:***@host and ***, ***, *** ***"
    assert redaction.redact({"url": "postgresql://u:other-pass@db/x"}) == {"url": "postgresql://u:***@db/x"}
    assert redaction.redact({"max_tokens": 4096, "api_key_env": "OPENAI_API_KEY"}) == {
        "max_tokens": 4096,
        "api_key_env": "OPENAI_API_KEY",
    }
