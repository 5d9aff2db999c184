"""`evalframe align` and MLflow's `judge.align()` side by side: the same labelled items, the same judge
model, the same held-out part; held-out kappa, judge calls and seconds for each.

    PYTHONPATH=. .venv/bin/python bench/align_vs_mlflow.py [--items 50] [--holdout 0.5] [--no-simba]

The protocol is a user's: the items are judged once by `evalframe scorer=rules` (logged to MLflow: the
run whose items people labelled), then aligned. evalframe's rows run `evalframe align run_id=RUN`
(that run's items, people's labels and the judge's verdicts); MLflow's rows run `judge.align()` on
traces of the training part. Neither side pays for that first run, and both take the held-out
"before" verdicts from it (evalframe's align reads them from the run, the bench gives MLflow's rows the
same ones), so both are counted alike: the calls of align itself plus the aligned judge's on the
held-out part. Every row starts with an empty cache (evalframe's, DSPy's).

The judge model is the local test server (tests/testserver.py) speaking OpenAI's wire, reached through
LiteLLM over HTTP by both systems; calls are counted at the server. Its judge is the double of
tests/run/test_align.py (`team_judge`): it knows no team rule ("naming a competitor fails") until a
prompt states it, and the rule is in people's comments only. evalframe's prompts reach
`team_judge` as they are; MLflow's prompts are another text, read by `mlflow_judge` below with the same
rules (a competitor named in the prompt is banned; a reply shown as an example gets its verdict). The
guideline writer is the test's too: besides the rule people's comments support, it writes one that no
comment supports ("a reply that states a day fails", which fails every reply here); a second pass runs
with a writer that does not.

MLflow's align needs dspy, which evalframe does not depend on (installing it beside evalframe would move
cloudpickle past the pin of the ray extra): MLflow's side runs in a venv of its own,
bench/.venv-mlflow-align (mlflow, litellm and dspy pinned below; $ALIGN_BENCH_VENV names another), made
on the first run. MemAlign, the default optimizer, embeds the items too (openai:/text-embedding-3-small
by default): the same server answers /v1/embeddings, so nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
VENV = Path(os.environ.get("ALIGN_BENCH_VENV") or HERE / ".venv-mlflow-align")
PINS = ["mlflow==3.17.2", "litellm==1.106.2", "dspy==3.4.1"]
JUDGE = "gpt-4o-mini"  # conf/model/gpt.yaml's name: both systems ask the server for the same model
NAME = "rules"
INSTRUCTIONS = (  # tests/run/test_align.py's RULES_PROMPT, as MLflow's judges take a prompt
    "Does this reply to a customer follow the team's rules?\n\nQuestion: {{ inputs }}\n\n"
    "Reply: {{ outputs }}\n\nAnswer pass or fail."
)
UNSUPPORTED = True  # the guideline writer writes the test's unsupported rule too (the second pass: not)


# ------------------------------------------------------------------ the judge double, for MLflow's prompts
def _text(request: Any) -> str:
    return "\n".join(str(m["content"]) for m in request.messages)


def mlflow_judge(request: Any) -> dict[str, Any]:
    """team_judge's rules on MLflow's judge prompt: the item is the user message's `outputs: ...` line;
    MemAlign's examples are `Example N: {...}` lines, SIMBA's demos sections of the instructions."""
    from tests.run.test_align import COMPETITOR, DAYS

    prompt = _text(request)
    user = next(m["content"] for m in request.messages if m["role"] == "user")
    reply = user.split("outputs: ", 1)[1].strip() if "outputs: " in user else ""
    reply = reply.strip('"')
    for line in prompt.splitlines():
        if reply and reply in line and re.search(r"'result': '(pass|fail)'", line):
            verdict = re.search(r"'result': '(pass|fail)'", line)
            assert verdict is not None
            return {"result": verdict.group(1), "rationale": "I was shown this one"}
    banned = [name for name in COMPETITOR.findall(prompt) if name in reply]
    if banned:
        return {"result": "fail", "rationale": f"names the competitor {banned[0]}"}
    if DAYS in prompt and "day" in reply:
        return {"result": "fail", "rationale": "states a day"}
    return {"result": "pass", "rationale": "a helpful reply"}


def memalign_writer(request: Any) -> dict[str, Any]:
    """tests/run/test_align.py's guideline_writer for MemAlign's distillation prompt: a rule per
    competitor people's comments name (twice, in other words), each citing the records that name it,
    and (unless UNSUPPORTED is off) the rule no comment supports, citing the records people failed."""
    from tests.run.test_align import COMPETITOR, DAYS

    prompt = _text(request)
    records = re.findall(r'"id": (\d+),(.*?)\n}', prompt, re.DOTALL)
    guidelines = []
    if UNSUPPORTED:
        failed = [int(i) for i, body in records if '"result": "fail"' in body]
        guidelines.append({"guideline_text": DAYS, "source_trace_ids": failed})
    for name in sorted(set(COMPETITOR.findall(prompt))):
        cited = [int(i) for i, body in records if f"competitor ({name})" in body]
        for text in (
            f"A reply that names the competitor ({name}) fails.",
            f"a reply that names the competitor ({name}) fails",
        ):
            guidelines.append({"guideline_text": text, "source_trace_ids": cited})
    return {"guidelines": guidelines}


def bench_judge(request: Any) -> Any:
    """The one responder of the server: evalframe's prompts to the test's double, MLflow's to its
    reading of the same rules."""
    from tests.run.test_align import DAYS, guideline_writer, team_judge
    from tests.testserver import echo_schema_responder

    properties = (request.schema or {}).get("properties", {})
    if "rules" in properties:  # evalframe's guideline writer
        found = guideline_writer(request)
        if not UNSUPPORTED:
            found["rules"] = [r for r in found["rules"] if r != DAYS]
        return found
    if "guidelines" in properties:  # MemAlign's distillation
        return memalign_writer(request)
    if "result" in properties:  # an MLflow judge
        return mlflow_judge(request)
    if "[[ ## " in _text(request):  # DSPy's chat adapter (SIMBA's optimizer model)
        return dspy_reply(request)
    if "<REPLY-" in _text(request):
        return team_judge(request)
    return echo_schema_responder(request)


def dspy_reply(request: Any) -> str:
    """An answer in DSPy's chat format to any signature: each output field the system message names, the
    advice (SIMBA's module_advice) written by the guideline writer's rules from what the prompt shows."""
    from tests.run.test_align import COMPETITOR

    system = "\n".join(m["content"] for m in request.messages if m["role"] == "system")
    prompt = _text(request)
    outputs = system.split("Your output fields are:", 1)[-1].split("All interactions", 1)[0]
    fields = re.findall(r"\d+\. `(\w+)` \(([^)]*)\)", outputs)
    names = sorted(set(COMPETITOR.findall(prompt)))
    advice = (
        " ".join(f"A reply that names the competitor ({n}) fails." for n in names)
        or "Judge each reply by the team's rules, as the better trajectories did."
    )
    modules = re.search(r"\[\[ ## module_names ## \]\]\n(.*?)\n", prompt)
    keys = json.loads(modules.group(1)) if modules else ["self"]
    parts = []
    for name, kind in fields:
        value: Any = {k: advice for k in keys} if kind.startswith("dict") else advice
        parts.append(f"[[ ## {name} ## ]]\n{json.dumps(value) if isinstance(value, dict) else value}")
    return "\n\n".join([*parts, "[[ ## completed ## ]]"])


# ------------------------------------------------------------------ MLflow's side (in its own venv)
def _stats(base: str) -> dict[str, int]:
    with urllib.request.urlopen(f"{base}/_stats") as answer:
        return dict(json.load(answer)["by_protocol"])


def _spent(base: str, since: dict[str, int], started: float) -> dict[str, float]:
    now = _stats(base)
    return {
        "judge": now.get("openai", 0) - since.get("openai", 0),
        "embeddings": now.get("embeddings", 0) - since.get("embeddings", 0),
        "seconds": time.perf_counter() - started,
    }


def _traces(items: list[dict[str, Any]]) -> list[Any]:
    """One trace per training item (the question in, the reply out), with people's label and comment as
    HUMAN feedback named after the judge: what judge.align() reads."""
    import mlflow
    from mlflow.entities import AssessmentSource, AssessmentSourceType

    people = AssessmentSource(source_type=AssessmentSourceType.HUMAN, source_id="people")
    ids = []
    for item in items:
        with mlflow.start_span(name="reply") as span:
            span.set_inputs({"question": item["input"]})
            span.set_outputs(item["output"])
        ids.append(span.trace_id)
    mlflow.flush_trace_async_logging()  # the traces stored before feedback is logged onto them
    for trace_id, item in zip(ids, items, strict=True):
        verdict = "pass" if item["label"] == 1 else "fail"
        mlflow.log_feedback(
            trace_id=trace_id, name=NAME, value=verdict, rationale=item["comment"], source=people
        )
    return [mlflow.get_trace(i) for i in ids]


def _judged(judge: Any, items: list[dict[str, Any]]) -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for item in items:
        feedback = judge(inputs={"question": item["input"]}, outputs=item["output"])
        found[item["id"]] = None if feedback.error else str(feedback.value)
    return found


def mlflow_side(spec: dict[str, Any]) -> dict[str, Any]:
    """MLflow's judge.align(train traces, optimizer), then the aligned judge on the held-out items (the
    judge as it was is not asked: its held-out verdicts are the judged run's, as evalframe's)."""
    from typing import Literal

    import mlflow
    from mlflow.genai.judges import make_judge

    base = spec["server"]
    mlflow.set_tracking_uri(f"sqlite:///{spec['dir']}/mlflow.db")
    mlflow.set_experiment("align-vs-mlflow")
    traces = _traces(spec["train"])
    judge = make_judge(
        name=NAME,
        instructions=INSTRUCTIONS,
        feedback_value_type=Literal["pass", "fail"],
        model=f"openai:/{JUDGE}",
    )
    # Warm up (imports, LiteLLM's first call) before the clock starts, as evalframe's side is warmed up
    import dspy  # noqa: F401
    from mlflow.genai.judges.optimizers import MemAlignOptimizer, SIMBAAlignmentOptimizer  # noqa: F401

    judge(inputs={"question": "warm-up"}, outputs="warm-up")
    out: dict[str, Any] = {"phases": {}}
    since, started = _stats(base), time.perf_counter()
    try:
        if spec["optimizer"] == "simba":
            from mlflow.genai.judges.optimizers import SIMBAAlignmentOptimizer

            aligned = judge.align(traces, SIMBAAlignmentOptimizer(model=f"openai:/{JUDGE}"))
        else:
            aligned = judge.align(traces)  # MemAlign, the default
    except Exception as error:  # what blocks it, said in the table's note
        out["error"] = f"{type(error).__name__}: {error}"
        return out
    out["phases"]["align"] = _spent(base, since, started)
    out["guidelines"] = [g.guideline_text for g in getattr(aligned, "_semantic_memory", [])]
    out["instructions"] = aligned.instructions
    since, started = _stats(base), time.perf_counter()
    out["after"] = _judged(aligned, spec["held_out"])
    out["phases"]["after"] = _spent(base, since, started)
    return out


def _venv() -> Path:
    """bench/.venv-mlflow-align's python, the venv made on the first run."""
    python = VENV / "bin" / "python"
    if not python.exists():
        print(f"making {VENV} ({', '.join(PINS)}): a minute or two, once", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *PINS], check=True)
    return python


def run_mlflow(
    optimizer: str, train: list[dict], held: list[dict], server: str, work: Path
) -> dict[str, Any]:
    spec = {"optimizer": optimizer, "train": train, "held_out": held, "server": server, "dir": str(work)}
    (work / "spec.json").write_text(json.dumps(spec))
    env = {
        **os.environ,
        "OPENAI_API_BASE": f"{server}/v1",
        "OPENAI_API_KEY": "sk-bench",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "PYTHONPATH": "",
        "DSPY_CACHEDIR": str(work / "dspy-cache"),  # every run pays for its own calls, as evalframe's
        "MLFLOW_GENAI_EVAL_MAX_WORKERS": "1",
    }
    done = subprocess.run(
        [str(_venv()), __file__, "--mlflow-side", str(work / "spec.json"), str(work / "out.json")],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    (work / "log.txt").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["no output"])[-1], "phases": {}}
    return dict(json.loads((work / "out.json").read_text()))


# ------------------------------------------------------------------ evalframe's side (this process)
def judge_once(args: list[str], work: Path) -> dict[str, Any]:
    """The labelled items judged once by `evalframe scorer=rules` (logged to MLflow in `work`): the run
    both sides align from. Its id, its MLflow store and its verdicts by item ("pass" or "fail")."""
    from mlflow.tracking import MlflowClient

    from evalframe.cli import main as evalframe
    from evalframe.results.results_file import read_items

    os.environ["EVALFRAME_CACHE_DIR"] = str(work / "cache")
    store = f"sqlite:///{work / 'mlflow.db'}"
    judged = [a for a in args if a != "tracking=none"]
    with contextlib.redirect_stdout(io.StringIO()) as said, contextlib.chdir(work):
        code = evalframe([*judged, f"tracking.uri={store}", "tracking.traces=false", "hydra.run.dir=judged"])
    if code != 0:
        raise SystemExit(f"the judged run failed (exit {code}): {said.getvalue()[-300:]}")
    client = MlflowClient(store)
    experiment = client.get_experiment_by_name("evalframe")
    assert experiment is not None
    [run] = client.search_runs([experiment.experiment_id])
    items = read_items(work / "judged" / "results.jsonl")
    verdicts = {i.id: {1.0: "pass", 0.0: "fail"}.get(i.scores[NAME].score) for i in items}
    return {"run_id": run.info.run_id, "store": store, "verdicts": verdicts}


def run_evalframe(method: str, args: list[str], work: Path, server: Any) -> dict[str, Any]:
    """`evalframe align run_id=RUN align.method=METHOD` with an empty cache: its calls and seconds."""
    from evalframe.cli import align as command

    os.environ["EVALFRAME_CACHE_DIR"] = str(work / "cache")  # every run pays for its own calls
    server.reset()
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()) as said, contextlib.chdir(work):
        code = command.main([*args, f"align.method={method}", "output_dir=al"])
    seconds = time.perf_counter() - started
    if code != 0:
        return {"error": f"exit {code}: {said.getvalue()[-300:]}"}
    found = json.loads((work / "al" / "alignment.json").read_text())
    calls = {"judge": server.count() - sum(r.protocol == "embeddings" for r in server.requests)}
    calls["embeddings"] = sum(r.protocol == "embeddings" for r in server.requests)
    read = next((x for x in said.getvalue().splitlines() if "verdicts read from" in x), "")
    return {"found": found, "calls": calls, "seconds": seconds, "read": read}


# ------------------------------------------------------------------ the table
def _kappas(before: dict[str, Any], after: dict[str, Any], held: list[dict]) -> dict[str, Any]:
    """Held-out kappa before and after, with the 95% intervals and the paired one of the change,
    computed as evalframe align computes its own (evalframe.results.agreement)."""
    from evalframe.results import agreement

    def score(value: Any) -> float:
        return {"pass": 1.0, "fail": 0.0}.get(str(value), math.nan)

    old = [score(before.get(i["id"])) for i in held]
    new = [score(after.get(i["id"])) for i in held]
    human = [float(i["label"]) for i in held]
    return {
        "before": agreement.agreement(old, human).get("kappa", math.nan),
        "after": agreement.agreement(new, human).get("kappa", math.nan),
        "after_interval": tuple(agreement.intervals(new, human, keys=("kappa",))["kappa"]),
        "interval": tuple(agreement.change("kappa", old, new, human)),
        "unscored": sum(math.isnan(s) for s in new),
    }


def _row(
    label: str, writer: str, kappa: dict[str, Any], align: int, held: int, embed: int, seconds: float
) -> list[str]:
    after = f"{kappa['after']:.3f} [{kappa['after_interval'][0]:.2f}, {kappa['after_interval'][1]:.2f}]"
    change = (
        f"{kappa['after'] - kappa['before']:+.3f} [{kappa['interval'][0]:.2f}, {kappa['interval'][1]:.2f}]"
    )
    return [
        label,
        writer,
        f"{kappa['before']:.3f}",
        after,
        change,
        f"{align} + {held} = {align + held}",
        str(embed),
        f"{seconds:.1f}",
    ]


HEADER = [
    "method",
    "writer",
    "kappa before",
    "kappa after [95% CI]",
    "change [paired 95% CI]",
    "judge calls: align + held-out",
    "embed calls",
    "seconds",
]


def _print(rows: list[list[str]], notes: list[str]) -> None:
    widths = [max(len(r[i]) for r in [HEADER, *rows]) for i in range(len(HEADER))]
    for row in [HEADER, ["-" * w for w in widths], *rows]:
        print(" | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
    for note in notes:
        print(note)


def evalframe_row(
    method: str, writer: str, args: list[str], work: Path, server: Any
) -> list[str | list[str]]:
    """The table's row of `evalframe align run_id=RUN` (align.method=METHOD) and what it said of the
    run's verdicts, or what stopped it."""
    done = run_evalframe(method, args, work, server)
    label = f"evalframe align.method={method}"
    if "error" in done:
        return [f"{label}: {done['error']}"]
    found = done["found"]
    kappa = next(c for c in found["figures"]["changes"] if c["metric"] == "kappa")
    held_calls = len(found["held_out"])  # the aligned judge (the judge as it was: the run's verdicts)
    align_calls = done["calls"]["judge"] - held_calls
    row = _row(label, writer, kappa, align_calls, held_calls, done["calls"]["embeddings"], done["seconds"])
    return [row, f"{label} ({writer}): {done['read']}"]


def mlflow_row(
    optimizer: str, writer: str, split: tuple[list, list], before: dict[str, Any], server: str, work: Path
) -> list[list[str] | str]:
    """The table's row of MLflow's judge.align() (`before`: the judged run's held-out verdicts), or what
    stopped it."""
    train, held = split
    side = run_mlflow(optimizer, train, held, server, work)
    label = f"MLflow judge.align() {'MemAlign' if optimizer == 'memalign' else 'SIMBA'}"
    if "after" not in side:
        return [f"{label}: {side.get('error')}"]
    phases = side["phases"]
    kappa = _kappas(before, side["after"], held)
    seconds = sum(p["seconds"] for p in phases.values())
    embed = sum(int(p["embeddings"]) for p in phases.values())
    held_calls = int(phases["after"]["judge"])
    said = [f"{label} ({writer}): guidelines kept {side.get('guidelines')}"]
    if optimizer == "simba":
        writer = "-"  # SIMBA asks its model for rules, shown no comment (see the notes)
        changed = side.get("instructions", "").strip() != INSTRUCTIONS.strip()
        said = [f"{label}: its judge's instructions {'changed' if changed else 'unchanged'} (rules, demos)"]
    return [_row(label, writer, kappa, int(phases["align"]["judge"]), held_calls, embed, seconds), *said]


PROTOCOL = (
    "protocol: the {n} items judged once by `evalframe scorer=rules` (logged to MLflow: the run people's "
    "labels are on; its {n} calls counted for neither side), then each row aligns from it with an empty "
    "cache: evalframe's runs `evalframe align run_id=RUN`, MLflow's judge.align() on traces of the same "
    "training part. Judge calls = the calls of align itself + the aligned judge on the held-out part; the "
    "held-out verdicts of the judge as it was are the run's for both (evalframe's align reads them from "
    "the run, 0 calls; the bench gives MLflow's rows the same ones), as is kappa before. Seconds: align and "
    "the aligned judge on the held-out part."
)


def main() -> None:
    global UNSUPPORTED
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=50)
    parser.add_argument("--holdout", type=float, default=0.5)
    parser.add_argument("--no-simba", action="store_true", help="MemAlign only on MLflow's side")
    parser.add_argument("--mlflow-side", nargs=2, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.mlflow_side:  # the child, in MLflow's venv
        spec, out = options.mlflow_side
        Path(out).write_text(json.dumps(mlflow_side(json.loads(Path(spec).read_text())), default=str))
        return
    sys.path.insert(0, str(HERE.parent))
    from tests.conftest import fake_model
    from tests.run.test_align import labelled_items, setup
    from tests.testserver import FakeLLMServer

    os.environ.setdefault("OPENAI_API_KEY", "sk-bench")
    work = Path(tempfile.mkdtemp(prefix="align-vs-mlflow-"))
    items = labelled_items(options.items)
    by_id = {i["id"]: i for i in items}
    rows: list[list[str] | str] = []
    with FakeLLMServer(responder=bench_judge) as server:
        labelled = [*setup(work, items), *fake_model(server)]
        judged = judge_once(labelled, _fresh(work, "judged"))  # the run people labelled: not measured
        config_dir = labelled[: labelled.index("scorer=rules") + 1]  # --config-dir DIR scorer=rules
        args = [f"run_id={judged['run_id']}", *config_dir, *fake_model(server), "tracking=none"]
        args += [f"dataset.tracking_uri={judged['store']}", f"align.holdout={options.holdout}"]
        # A first align, unmeasured (imports, first calls), gives the split every system is measured on.
        found = run_evalframe("examples", args, _fresh(work, "warm-up"), server)["found"]
        split = ([by_id[i] for i in found["train"]], [by_id[i] for i in found["held_out"]])
        for UNSUPPORTED in (True, False):
            writer = "with the unsupported rule" if UNSUPPORTED else "supported rule only"
            tag = "unsupported" if UNSUPPORTED else "supported"
            for method in ["examples", "both"] if UNSUPPORTED else ["both"]:
                rows += evalframe_row(method, writer, args, _fresh(work, f"evalframe-{method}-{tag}"), server)
            simba = UNSUPPORTED and not options.no_simba
            for optimizer in ["memalign", "simba"] if simba else ["memalign"]:
                folder = _fresh(work, f"mlflow-{optimizer}-{tag}")
                rows += mlflow_row(optimizer, writer, split, judged["verdicts"], server.base_url, folder)
    notes = [r for r in rows if isinstance(r, str)]
    notes.append(
        f"{options.items} labelled items ({len(split[0])} training, {len(split[1])} held out, the same for "
        f"every row), align.holdout={options.holdout}; work files in {work}"
    )
    notes += textwrap.wrap(PROTOCOL.format(n=options.items), 110)
    _print([r for r in rows if not isinstance(r, str)], notes)


def _fresh(work: Path, name: str) -> Path:
    folder = work / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


if __name__ == "__main__":
    main()
