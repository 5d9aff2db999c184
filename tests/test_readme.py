"""The README is tested as written: every fenced block is taken from README.md and run, or, where it
cannot run here, named with the reason and the test that covers it instead.

- `evalframe ...` / `python -m evalframe ...` lines (bash blocks, a CI step's `run:`) are composed
  exactly as typed, then run in process on a few rows with the judge pointed at the scripted model
  (a sweep runs its first job); config files (`# @package`) and prompts (`{# path #}`) are written
  where their first lines say, so the commands that use them find them.
- Python blocks run as they are, against the local test server (the key and base URL variables that
  LiteLLM reads point the `gpt` and `claude` presets at it); the pytest example runs under pytest.
- `make` lines must name a Makefile target; other lines must be listed in NOT_RUN with a reason.
"""

from __future__ import annotations

import csv
import json
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalframe.data.rows import load_rows
from evalframe.run import pipeline
from evalframe.sweep import shards
from tests.conftest import compose, fake_model
from tests.conversation_oracle import JUDGES
from tests.scripted import ScriptedModel
from tests.testserver import FakeLLMServer, constrained_decoder

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

# Lines a test cannot run here, by how they start, and why.
NOT_RUN = {
    "export ": "sets a variable for the commands after it",
    "source ": "activates the venv in the reader's shell",
    "pip install": "installs from PyPI (no internet here); make setup and setup-dev install the extras",
    "mlflow server": "needs PostgreSQL and S3; tests/e2e/test_postgres.py runs it on a real PostgreSQL",
    "CANDIDATE=": "reads the run id the line above printed; tests/cli/test_compare.py runs the step in bash",
}
# Where the README's no-key lines send the judge: the dry run's test server, or a server of the reader's.
DRY_RUN_BASE = "http://127.0.0.1:8000/v1"
# evalframe commands composed but not run here, and where they are run instead.
COMPOSED_ONLY = {
    "rescore": "re-scores a logged run id (tests/cli/test_rescore.py)",
    "ui": "starts the MLflow UI until Ctrl-C (tests/cli/test_ui_command.py)",
    "--help": "prints the help (tests/cli/test_cli.py)",
    "--cfg": "prints the composed config",
    "target=http": "needs your service (tests/targets/test_targets.py runs it against a local one)",
    "model.batch=true": "needs a batch API (tests/models/test_batch.py runs it against the test server's)",
}
ALIGN_RUN_ID = (
    "aligns a logged run's items by its id (tests/run/test_align.py::"
    "test_align_run_id_reads_a_logged_runs_labelled_items aligns a run it logs)"
)
COMPARE = "compares two logged runs by id (tests/cli/test_compare.py runs it, and the CI step, on real runs)"
RUNS_COMMAND = "lists the runs of a store (tests/cli/test_runs.py runs it on real runs)"


@dataclass
class Block:
    lang: str
    body: str
    line: int  # where it starts in README.md

    @property
    def where(self) -> str:
        return f"README.md line {self.line}"


def blocks() -> list[Block]:
    text = README.read_text()
    found = []
    for match in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.M | re.S):
        found.append(Block(match.group(1), match.group(2), text[: match.start()].count("\n") + 1))
    return found


def logical_lines(body: str) -> list[str]:
    """A shell block's commands: continuations joined, comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", body)
    lines = []
    for line in joined.splitlines():
        line = re.sub(r"\s+#\s.*$", "", line).strip()  # a trailing "  # comment"
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def shell_lines() -> list[tuple[Block, str]]:
    """Every command a reader may copy: bash blocks, and the `run:` of a CI step written in YAML."""
    found = []
    for block in blocks():
        if block.lang == "bash":
            found += [(block, line) for line in logical_lines(block.body)]
        elif block.lang == "yaml" and "# @package" not in block.body:
            steps = yaml.safe_load(block.body)
            # GitHub puts in its ${{ expressions }} before the shell sees the line.
            runs = [re.sub(r"\$\{\{[^}]*\}\}", "ci", step["run"]) for step in steps]
            found += [(block, line) for run in runs for line in logical_lines(run)]
    return found


def evalframe_args(line: str) -> list[str] | None:
    line = line.split(" | ", 1)[0]  # `... | tee eval.log`: the command is what is left of the pipe
    for prefix in ("python -m evalframe", "evalframe"):
        if line == prefix or line.startswith(prefix + " "):
            return shlex.split(line.removeprefix(prefix))
    return None


def _embeds(line: str) -> bool:
    """Whether a command loads the local embedding model (semantic similarity, the default scorer)."""
    return "semantic_similarity" in line or "scorer" not in line


def _files(block_filter: str) -> list[tuple[str, str]]:
    """(path, content) of the config, prompt and code files the README asks the reader to save."""
    saved = []
    for block in blocks():
        if block.lang == "yaml" and "# @package" in block.body:
            [path] = re.findall(r"^# (\S+\.yaml)", block.body, re.M)
            saved.append((path, block.body))
        elif block.lang == "python" and (module := re.match(r"# (\w[\w/]*\.py)\b", block.body)):
            saved.append((module.group(1), block.body))  # your module (mypkg/rag.py), for target.fn=
        elif block.lang == "jinja":
            first = block.body.splitlines()[0]
            path = re.fullmatch(r"\{# (\S+) #\}", first)
            assert path, f"{block.where}: a prompt block starts with {{# its/path.j2 #}}"
            saved.append((path.group(1), block.body))
    return [(p, c) for p, c in saved if block_filter in p]


def _saved_scripts(block: Block) -> list[str]:
    """The block's `python FILE` lines whose FILE is one the README asks the reader to save (rag_app.py):
    run before the block's commands, as the reader runs them (a process each: slow)."""
    saved = {path for path, _ in _files("")}
    return [
        line for line in logical_lines(block.body) if line.startswith("python ") and line.split()[1] in saved
    ]


COMMANDS = [
    pytest.param(
        b,
        line,
        marks=[pytest.mark.slow] if _embeds(line) or _saved_scripts(b) else [],
        id=f"line{b.line}:{line[:60]}",
    )
    for b, line in shell_lines()
    if evalframe_args(line) is not None
]


def test_every_local_link_and_picture_is_there() -> None:
    """A picture or file the README links to exists, and each #anchor names one of its headings."""
    text = README.read_text()
    anchors = {
        re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        for heading in re.findall(r"^#+ (.+)$", text, re.MULTILINE)
    }
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    assert any(t.endswith(".png") for t in targets)
    for target in targets:
        if target.startswith("#"):
            assert target[1:] in anchors, f"README links to {target}, which is no heading"
        elif not re.match(r"[a-z]+://", target):
            assert (ROOT / target.split("#")[0]).exists(), f"README links to {target}, which is not there"


def test_every_block_is_run_or_says_why_not() -> None:
    makefile = (ROOT / "Makefile").read_text()
    unknown = []
    for block in blocks():
        if block.lang == "" or (block.lang in ("yaml", "jinja", "python")):
            continue  # shown output; config, prompt and code files are run below
        if block.lang != "bash":
            unknown.append(f"{block.where}: a ```{block.lang} block")
    for block, line in shell_lines():
        if evalframe_args(line) is not None:
            continue
        if line.startswith("make "):
            target = line.split()[1]
            assert re.search(rf"^{re.escape(target)}:", makefile, re.M), (
                f"{block.where}: no make target {target}"
            )
        elif line in _saved_scripts(block):
            continue  # your application, saved from the README and run before the block's commands
        elif line.startswith((".venv/bin/python ", "python ")):
            # A script, or a module of the checkout (the dry run's `python -m tests.testserver`, which
            # test_the_dry_run_runs_as_written starts as written).
            words = line.split()
            script = ROOT / (words[2].replace(".", "/") + ".py" if words[1] == "-m" else words[1])
            assert script.is_file(), f"{block.where}: {script} does not exist"
        elif not line.startswith(tuple(NOT_RUN)):
            unknown.append(f"{block.where}: {line}")
    assert not unknown, "README blocks no test runs; run them here or add them to NOT_RUN:\n" + "\n".join(
        unknown
    )


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A reader's working directory: the files the README's commands name (your data, your function,
    your config and prompt files), made from the bundled sample."""
    monkeypatch.chdir(tmp_path)
    for path, content in _files(""):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(content)
    rows = load_rows({"path": None})[:6]
    records = [
        {
            "id": r.id,
            "input": r.input,
            "question": r.input,
            "ground_truth": r.ground_truth,
            "output": r.output,
        }
        for r in rows
    ]
    for name in ("qa.jsonl", "big.jsonl"):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / "qa.json").write_text(json.dumps(records))  # the same rows as one JSON array
    # Replies rated by people (1-5) with their comments: what `evalframe align` learns from.
    labelled = [
        {
            "id": f"l{i}",
            "input": f"Where is my order {i}?",
            "output": f"Order {i} ships today.{' Ugh.' * (i % 3)}",
            "rating": 5 - 2 * (i % 3),
            "comment": "curt" if i % 3 else "friendly",
        }
        for i in range(20)
    ]
    (tmp_path / "labelled.jsonl").write_text("".join(json.dumps(r) + "\n" for r in labelled))
    # The same rows with retrieved chunks, for the RAG judges: the answer's source, ranked second.
    chunks = [
        {"contexts": ["An unrelated passage about the weather.", str(r["ground_truth"])]} for r in records
    ]
    (tmp_path / "rag.jsonl").write_text(
        "".join(json.dumps(r | c) + "\n" for r, c in zip(records, chunks, strict=True))
    )
    with open(tmp_path / "qa.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, ["id", "question", "ground_truth", "output"], extrasaction="ignore")
        writer.writeheader()
        writer.writerows(records)
    (tmp_path / "mypkg").mkdir(exist_ok=True)  # the README's mypkg/rag.py may be there already
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "agent.py").write_text(
        "def answer(question, row=None):\n    return 'Paris' if 'France' in question else 'I do not know'\n"
    )
    # A RAG function traced with MLflow, as the README's traced-target line calls it.
    (tmp_path / "mypkg" / "traced.py").write_text(
        "import mlflow\n"
        "from mlflow.entities import Document\n\n"
        "@mlflow.trace(span_type='RETRIEVER')\n"
        "def retrieve(question):\n"
        "    return [Document(page_content='Paris is the capital of France.', metadata={'doc_uri': 'kb://1'})]\n\n"
        "@mlflow.trace\n"
        "def answer(question):\n"
        "    return retrieve(question)[0].page_content\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def _one_job(args: list[str], cwd: Path) -> list[str]:
    """The overrides of the first job of a command line: options and placeholders removed, a sweep's
    lists cut to their first value, `--config-dir` as the search path it adds."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    overrides, rest = [], iter(args)
    for arg in rest:
        if arg == "--config-dir":
            overrides.append(f"hydra.searchpath=[file://{cwd / next(rest)}]")
        elif arg in ("-m", "--multirun", "rescore", "ui", "--help", "--cfg", "job") or arg.startswith(
            ("run_id=", "port=")
        ):
            continue
        else:
            overrides.append(arg.replace("$PWD", str(cwd)))
    parsed = OverridesParser.create().parse_overrides(
        [o for o in overrides if not o.startswith("hydra.searchpath")]
    )
    first = [o for o in overrides if o.startswith("hydra.searchpath")]
    for o in parsed:
        if o.is_interval_sweep():
            first.append(f"{o.get_key_element()}={o.value().start}")  # type: ignore[union-attr]
        elif o.is_sweep_override():
            value = next(iter(o.sweep_string_iterator()))
            first.append(f"{o.get_key_element()}={value}")
        else:
            first.append(str(o.input_line))
    return first


@pytest.mark.parametrize(("block", "line"), COMMANDS)
def test_each_command_runs_as_written(
    block: Block,
    line: str,
    workdir: Path,
    scripted: ScriptedModel,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    for script in _saved_scripts(block):  # the README's own traced app fills ./mlflow.db
        done = subprocess.run(
            [sys.executable, *script.split()[1:]], cwd=workdir, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, f"{block.where}: `{script}` failed:\n{done.stderr[-3000:]}"
    if "dataset=mlflow_traces" in line and not _saved_scripts(block):  # a traced app's store: ./mlflow.db
        store = request.getfixturevalue("traced_store")
        (workdir / "mlflow.db").write_bytes(Path(store.uri.removeprefix("sqlite:///")).read_bytes())
    # Judges named by preset alone (a panel's `models=[gpt,claude]`) reach a constrained decoder over
    # HTTP through the variables LiteLLM reads, as a reader's would reach the provider.
    with FakeLLMServer(responder=constrained_decoder(seed=block.line)) as server:
        for name, value in _provider_env(server).items():
            monkeypatch.setenv(name, value)
        _run_command(block, line, workdir, scripted, server)


def _provider_env(server: FakeLLMServer) -> dict[str, str]:
    return {
        "OPENAI_API_KEY": "sk-readme",
        "OPENAI_BASE_URL": server.openai_base,
        "ANTHROPIC_API_KEY": "sk-readme",
        "ANTHROPIC_API_BASE": server.base_url,
    }


def _run_command(
    block: Block, line: str, workdir: Path, scripted: ScriptedModel, server: FakeLLMServer
) -> None:
    args = evalframe_args(line)
    assert args is not None
    if args[:1] == ["compare"]:  # no config: its own key=value arguments, checked as it reads them
        from evalframe.cli.compare import _arguments

        assert _arguments(args[1:]), COMPARE
        return
    if args[:1] == ["review"]:  # no config either: run as written on a run logged here
        _review(args, workdir)
        return
    if args[:1] == ["runs"]:  # reads a store of logged runs: its arguments, checked as it reads them
        from evalframe.cli import runs

        assert runs._arguments(args[1:]), RUNS_COMMAND
        return
    if args[:1] == ["align"]:
        _align(args[1:], workdir, scripted, block)
        return
    if any(o.startswith("hydra.searchpath=[file://aligned") for o in args):
        _aligned_judge(workdir)  # the judge the block's `evalframe align` line writes
    overrides = _one_job(shards.expand(args), workdir)  # -m shards=N: its first shard
    chats = _judges_conversations(overrides)
    if "dataset=run" in overrides:  # the earlier run it judges again: one made here
        scripted.responder = constrained_decoder(seed=block.line)
        earlier = _simulated_run if chats else _earlier_run
        run_id = earlier(workdir, "dataset.run_id=RUN_ID" in overrides, scripted)
        overrides = [o.replace("RUN_ID", run_id) for o in overrides]
    skipped = [why for key, why in COMPOSED_ONLY.items() if key in args or key in overrides]
    if "rescore" in args:  # the logged run's command line comes first: it chose the scorers named
        overrides = [
            *dict.fromkeys(f"scorer={m}" for m in re.findall(r"(?:^|\s)scorers\.(\w+)\.", line)),
            *overrides,
        ]
    config = compose(overrides)  # exactly as typed: a bad key or group fails here
    if skipped:
        return
    # The judge, wherever the command points it, is the scripted model answering anything its reply
    # schema allows (a constrained decoder, knowing nothing of our prompts); a few rows keep it quick.
    scripted.responder = constrained_decoder(seed=block.line)
    if config["watch"]["every"] is not None:  # a watcher: its ticks (one, unless it says) into ./mlflow.db
        _watch([*overrides, *fake_model(scripted)[1:]], workdir, block, line)
        return
    # A no-key line's judge is at the dry run's address: the test's own server there, reached over HTTP
    # through LiteLLM as the line says; any other line's, the scripted model.
    dry = any(DRY_RUN_BASE in o for o in overrides)
    judge = [o.replace(DRY_RUN_BASE, server.openai_base) for o in overrides] if dry else overrides
    judged = [*judge, *([] if dry else fake_model(scripted)[1:]), "tracking=none", "dataset.limit=2"]
    if config["target"].get("model"):
        judged += [o.replace("model.", "target.model.", 1) for o in fake_model(scripted)[1:]]
    config = compose(judged)
    users = scripted.count("UserTurn")
    _, code = pipeline.evaluate(config, workdir / "run")
    assert code in (0, 1), f"{block.where}: `{line}` exited {code}"  # 1: a gate the sample fails
    assert server.count() > 0 or not dry, f"{block.where}: `{line}` asked no judge at {DRY_RUN_BASE}"
    if chats and "dataset=run" in overrides:  # stored simulated conversations: no user model asked
        assert scripted.count("UserTurn") == users, f"{block.where}: `{line}` asked the user model again"


def _review(args: list[str], workdir: Path) -> None:
    """`evalframe review push|pull` as written, on a run logged here into ./mlflow.db with its items'
    traces (the sample's recorded outputs scored by token_f1: no judge); RUN_ID is its id, and what a
    pull reads (a queue, a file) is pushed first. tests/cli/test_review.py runs both on a panel's
    run, with people's answers."""
    from tests.conftest import run_cli

    store = f"tracking.uri=sqlite:///{workdir / 'mlflow.db'}"
    result, code = pipeline.evaluate(
        compose(["dataset=sample", "scorer=token_f1", store]), workdir / "logged"
    )
    assert code in (0, 1) and result.run_id
    if args[1] == "pull":  # what it pulls: a queue, or a file (pushed with format=jsonl)
        [where] = [a.replace("labels=", "output=") for a in args if a.startswith(("queue=", "labels="))]
        to = [where] if where.startswith("queue=") else ["format=jsonl", where]
        pushed = run_cli(["review", "push", f"run_id={result.run_id}", *to, "size=2"], workdir)
        assert pushed.returncode == 0, pushed.stderr
    done = run_cli([a.replace("RUN_ID", result.run_id) for a in args], workdir)
    assert done.returncode == 0, f"`evalframe {' '.join(args)}`: {done.stderr}"


def _align(args: list[str], workdir: Path, scripted: ScriptedModel, block: Block) -> None:
    """An `evalframe align` line, read as the command reads it (its align.* keys and run_id= too) and
    composed; run in process, the judge the scripted model, unless it names a logged run by its id."""
    from evalframe.cli import align

    args = [a.replace("$PWD", str(workdir)) for a in args]
    _, overrides, _ = align._read(args)
    compose(overrides)  # exactly as typed: a bad key or group fails here
    if "dataset.run_id=RUN_ID" in overrides:
        assert ALIGN_RUN_ID
        return
    scripted.responder = constrained_decoder(seed=block.line)
    code = align.main([*args, *fake_model(scripted)[1:], "output_dir=al"])
    assert code == 0, f"{block.where}: evalframe align exited {code}"
    assert (workdir / "al" / "alignment.json").is_file() and (workdir / "aligned" / "scorer").is_dir()


def _aligned_judge(workdir: Path) -> None:
    """aligned/: the README's polite judge as `evalframe align` writes it (here with no examples: the
    command that writes it is run, examples and all, as a line of its own)."""
    from evalframe.scorers import aligned

    polite = compose(
        [
            f"hydra.searchpath=[file://{workdir / 'my_conf'}]",
            "scorer=polite",
            f"scorers.polite.prompt={workdir / 'my_prompts' / 'polite.j2'}",
        ]
    )["scorers"]["polite"]
    aligned.write(Path("aligned"), "polite", polite, [], "the README's test")


def _watch(overrides: list[str], workdir: Path, block: Block, line: str) -> None:
    """A watcher command, run by watch mode's own loop until its `watch.ticks` (1 when it sets none)."""
    import contextlib
    import io
    import os

    from evalframe.run import watch

    ticks = [] if any(o.startswith("watch.ticks=") for o in overrides) else ["watch.ticks=1"]
    config = compose(
        [*overrides, *ticks, "dataset.limit=4", f"tracking.uri=sqlite:///{workdir / 'mlflow.db'}"]
    )
    out = io.StringIO()
    here = Path.cwd()
    os.chdir(workdir)  # the tick journals go under ./outputs, as the command's would
    try:
        with contextlib.redirect_stdout(out):
            code = watch.main(config, workdir / "outputs" / "watch")
    finally:
        os.chdir(here)
    assert code == 0 and out.getvalue().count("\ntick ") + out.getvalue().startswith("tick ") >= 1, (
        f"{block.where}: `{line}` printed {out.getvalue()!r}"
    )


CONVERSATION_JUDGES = set(JUDGES)


def _judges_conversations(overrides: list[str]) -> bool:
    named = [re.findall(r"\w+", o.removeprefix("scorer=")) for o in overrides if o.startswith("scorer=")]
    return bool(CONVERSATION_JUDGES & {n for names in named for n in names})


def _simulated_run(workdir: Path, logged: bool, scripted: ScriptedModel) -> str:
    """The run conversation judges' `dataset=run` commands name: the README's chatbot (mybot.py) talking
    to a simulated user (the scripted model), two scenarios of chat_sample, stored where the README's
    `dataset.path=` says; its MLflow run id when `logged`, else ""."""
    from tests import scripted as scripted_model

    store = f"tracking.uri=sqlite:///{workdir / 'mlflow.db'}" if logged else "tracking=none"
    user = f"{{name: {scripted_model.NAME}, api_key_env: null, api_base: null, timeout: 10}}"
    simulated = ["dataset=chat_sample", "dataset.limit=2", "target=python", "target.fn=mybot:reply"]
    simulated += [f"target.simulate.user_model={user}", "target.simulate.max_turns=2", "scorer=goal_accuracy"]
    config = compose([*simulated, *fake_model(scripted)[1:], store, "tracking.traces=false"])
    result, code = pipeline.evaluate(config, workdir / "outputs" / "2025-06-01" / "10-00-00")
    assert code in (0, 1) and bool(result.run_id) == logged and scripted.count("UserTurn") > 0
    return result.run_id or ""


def _earlier_run(workdir: Path, logged: bool, scripted: ScriptedModel | None = None) -> str:
    """The run `dataset=run` commands name: rag.jsonl's recorded outputs scored by token_f1 (no judge),
    in the directory the README's `dataset.path=` gives and, when `logged`, in ./mlflow.db (where a run
    with tracking=none looks for `dataset.run_id`); its MLflow run id, else ""."""
    store = f"tracking.uri=sqlite:///{workdir / 'mlflow.db'}" if logged else "tracking=none"
    rag = ["dataset=jsonl", f"dataset.path={workdir / 'rag.jsonl'}", "scorer=token_f1"]
    config = compose([*rag, store, "tracking.traces=false"])
    result, code = pipeline.evaluate(config, workdir / "outputs" / "2025-06-01" / "10-00-00")
    assert code == 0 and bool(result.run_id) == logged
    return result.run_id or ""


@pytest.mark.slow
def test_the_python_blocks_run_as_written(
    workdir: Path, judge_server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In order, in one namespace, as a reader runs them in a notebook; a test file under pytest."""
    # LiteLLM's own variables send the presets to the local test server, so the code stays as written.
    for name, value in _provider_env(judge_server).items():
        monkeypatch.setenv(name, value)
    namespace: dict[str, Any] = {}
    for block in [b for b in blocks() if b.lang == "python"]:
        first = block.body.splitlines()[0]
        if not first.startswith("# tests/"):
            exec(compile(block.body, block.where, "exec"), namespace)
            continue
        path = workdir / first.removeprefix("# ")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(block.body)
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "evalframe.pytest_plugin", str(path)],
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        # The example's threshold may fail on the fake judge's scores; nothing else may.
        ran = "1 passed" in done.stdout or ("1 failed" in done.stdout and "assert " in done.stdout)
        assert ran and "Error" not in done.stdout.replace("AssertionError", ""), done.stdout + done.stderr
    assert judge_server.count() > 0  # the LLM examples reached the judge


@pytest.mark.slow
def test_the_dry_run_runs_as_written(tmp_path: Path) -> None:
    """README "Without an API key": the test judge started as written (from the checkout's root, on a
    free port where the README says 8000, which may be taken here), and the command beside it reaching
    it with no key in the environment: a run, every item scored by the judge over HTTP."""
    import socket

    from tests.conftest import run_cli

    [block] = [b for b in blocks() if "python -m tests.testserver" in b.body]
    server_line, command = logical_lines(block.body)
    assert DRY_RUN_BASE in command and "--port 8000" in server_line
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = shlex.split(server_line.replace("--port 8000", f"--port {port}"))
    judge = subprocess.Popen([sys.executable, *started[1:]], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert judge.stdout and "fake LLM server at" in judge.stdout.readline()
        args = evalframe_args(command.replace(DRY_RUN_BASE, f"http://127.0.0.1:{port}/v1"))
        done = run_cli([*(args or []), "dataset.limit=3", "tracking=none"], cwd=tmp_path)
    finally:
        judge.terminate()
        judge.wait(10)
    assert done.returncode == 0, done.stderr
    # its row: 3 items scored, none unscored
    assert re.search(r"│ answer_similarity +│ .*│ +3 │ +0 │", done.stdout), done.stdout
    assert re.search(r"model calls: [1-9]", done.stdout), done.stdout


# Benchmarks cheap enough to run as the README writes them (the others: their script must exist).
CHEAP_BENCHES = {"bench/bench_conversation_judges.py": "the six conversation judges against an oracle, ~15 s"}


@pytest.mark.slow
def test_the_cheap_benches_run_as_written() -> None:
    lines = [
        line for _, line in shell_lines() if line.startswith("python ") and line.split()[1] in CHEAP_BENCHES
    ]
    assert sorted(line.split()[1] for line in lines) == sorted(CHEAP_BENCHES)
    for line in lines:
        done = subprocess.run(
            [sys.executable, *shlex.split(line)[1:]],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        # a row per judge, and the re-scores of its stored replies sent no request
        assert all(f"| {judge} |" in done.stdout for judge in CONVERSATION_JUDGES), done.stdout
        assert "deepeval 0, mlflow 0, aggregate=all 0" in done.stdout, done.stdout


# The commands that compose a run's config alone: not log-run, compare, ui, review (no config of their own),
# align (its runs': test_each_command_runs_as_written), a re-score (the logged run's command line comes
# first) or --help.
RUNS = [
    pytest.param(b, line, id=f"line{b.line}:{line[:60]}")
    for b, line in shell_lines()
    if (args := evalframe_args(line)) is not None
    and args[:1] not in (["log-run"], ["compare"], ["ui"], ["runs"], ["rescore"], ["review"], ["align"])
    and "--help" not in args
]


@pytest.mark.parametrize(("block", "line"), RUNS)
def test_each_run_command_composes_into_the_typed_config(block: Block, line: str, workdir: Path) -> None:
    """Every README command's config is read whole by the typed settings the run reads (config.settings):
    each of its keys is a field there with the same value, none dropped (an unknown key is refused)."""
    from evalframe.config.check import check

    if "file://aligned" in line:
        _aligned_judge(workdir)
    config = compose(_one_job(evalframe_args(line) or [], workdir))
    typed = check(config).model_dump()
    assert {k: typed[k] for k in config} == config, f"{block.where}: {line}"
