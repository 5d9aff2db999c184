"""A traced RAG application and the MLflow store it fills: the traces the trace-reading tests read.

`answer(question)` is a help desk's RAG function instrumented with MLflow tracing as a user would
write it: `@mlflow.trace` on the function, a RETRIEVER span returning mlflow Documents (ids in their
metadata, ranked), TOOL spans for the questions that need a tool, tags and a session id set with
`mlflow.update_current_trace`, and an exception (an ERROR trace) for the questions it cannot take.
`answer_async(question)` is the same application as a coroutine (no tags, no errors). Either is a
live target too (`target.fn=tests.traced_app:answer`): each call leaves its own trace.

`seed(uri, experiment)` asks it every question of QUESTIONS, in order, into the store at `uri`, then
adds what people give: expectations and HUMAN feedback. What it seeds (`Seeded` holds the ids):

- 36 traces, one millisecond apart, so read oldest first they come in QUESTIONS' order: 30 OK and
  6 ERROR (questions 5, 11, 17, 23, 29 and 35 raise ValueError after retrieving: an ERROR trace whose
  root span has no outputs);
- tags: env=prod on even-numbered questions, env=staging on odd ones (18 each); team=billing on the 6
  questions about money, team=travel on the other 30; sessions session-0 .. session-11, three
  consecutive questions each;
- one RETRIEVER span each: the 3 documents of DOCUMENTS sharing most words with the question, best
  first, as mlflow Documents with metadata doc_uri `kb://N` and chunk_id `cN` (and id `dN`);
- TOOL spans: the 6 money questions call `convert_currency(amount=30, currency="USD")`, the 3 about
  night trains from Paris call `weather(city="Paris")`; the other 27 call no tool (all 9 are OK traces);
- expectations on the first 20 OK traces: `expected_response` (the best document's text) and
  `expected_tool_calls` (the calls made: [] for most);
- a HUMAN feedback `helpfulness` (n/9 for the n-th) on the first 10 OK traces, and on the first one
  also an LLM_JUDGE feedback of the same name (0.123), which `feedback:helpfulness` must not take.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")

import mlflow
from mlflow.entities import AssessmentSource, AssessmentSourceType, Document

from evalframe.data.rows import Row

EXPERIMENT = "rag-app"
DOCUMENTS = [
    "Refunds for cancelled trains are paid within 14 days to the original card.",
    "Bikes travel free on regional trains outside the morning rush hour.",
    "A railcard gives one third off most fares for a year and costs 30 euros.",
    "Seat reservations open 90 days before departure and cost 4 euros.",
    "Lost property is kept at the arrival station for 30 days.",
    "Dogs travel free if they are on a lead or in a basket.",
    "Night trains to Vienna leave Paris at 19:00 every day.",
    "Tickets bought online can be exchanged until the departure time for a fee of 5 euros.",
    "Children under 4 travel free without a seat of their own.",
    "The Paris to Lyon high-speed train takes two hours.",
    "Fares are shown in euros; card payments in other currencies are converted by your bank.",
    "Wheelchair assistance can be booked up to 24 hours before travel.",
]
CITIES = ("Paris", "Vienna", "Lyon", "Berlin")
_SUBJECTS = [
    "refunds for cancelled trains",
    "bikes on regional trains",
    "the price of a railcard in dollars",
    "seat reservations",
    "lost property",
    "dogs on trains",
    "night trains from Paris",
    "exchanging tickets bought online",
    "children travelling free",
    "the train from Paris to Lyon",
    "paying fares in pounds",
    "wheelchair assistance",
]
# 36 questions: three rounds over the subjects, each round asked differently.
QUESTIONS = [
    template.format(subject)
    for template in ("What do you say about {}?", "Tell me about {}.", "I have a question on {}.")
    for subject in _SUBJECTS
]
MONEY = ("dollars", "pounds", "price")


@dataclass
class Seeded:
    """The traces `seed` made, by what the tests ask of them (trace ids, oldest first)."""

    uri: str
    experiment: str
    experiment_id: str = ""
    ids: list[str] = field(default_factory=list)  # every trace, in the order asked
    ok: list[str] = field(default_factory=list)
    error: list[str] = field(default_factory=list)
    tags: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # tag -> value -> ids
    expected: list[str] = field(default_factory=list)  # with expected_response and expected_tool_calls
    rated: list[str] = field(default_factory=list)  # with a HUMAN helpfulness feedback
    documents: dict[str, list[Document]] = field(default_factory=dict)  # retrieved, in rank order
    tool_calls: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # made, in order
    questions: dict[str, str] = field(default_factory=dict)

    def overrides(self) -> list[str]:
        """A run's command line on these traces: dataset=mlflow_traces on the experiment, the run logged
        to the same store (beside its traces, as a trace dataset's run goes by default)."""
        return ["dataset=mlflow_traces", f"dataset.experiment={self.experiment}", f"tracking.uri={self.uri}"]

    def rows(self, *overrides: str) -> list[Row]:
        """The rows dataset=mlflow_traces reads from these traces (`overrides`: dataset.limit=4, ...),
        read as a run reads them."""
        from omegaconf import OmegaConf

        from evalframe.config.compose import compose
        from evalframe.run import sources

        cfg = compose(["dataset=mlflow_traces", f"dataset.experiment={self.experiment}", *overrides])
        dataset = OmegaConf.to_container(cfg.dataset, resolve=True)
        assert isinstance(dataset, dict)
        return list(iter(sources.rows({str(k): v for k, v in dataset.items()}, {"uri": self.uri})))


def feedbacks(store: Seeded) -> dict[str, list[Any]]:
    """The verdicts evalframe wrote onto the store's traces (the feedbacks carrying its digest), valid or
    not, oldest first, by trace id; the traces without one left out."""
    client = mlflow.MlflowClient(store.uri)
    found: dict[str, list[Any]] = {}
    for trace in client.search_traces(locations=[store.experiment_id], include_spans=False, max_results=500):
        mine = [
            a
            for a in trace.info.assessments
            if a.feedback is not None and "evalframe.digest" in (a.metadata or {})
        ]
        if mine:
            found[trace.info.trace_id] = sorted(mine, key=lambda a: a.create_time_ms)
    return found


def documents_prompt(score: Mapping[str, Any]) -> str:
    """The prompt of a journaled faithfulness score's step that shows the judge the retrieved documents."""
    [prompt] = [
        m["content"] for s in score["steps"] for m in s["messages"] if "Retrieved documents" in m["content"]
    ]
    return str(prompt)


def in_rank_order(prompt: str, documents: list[str]) -> bool:
    """Whether the prompt holds every document, best first."""
    at = [prompt.index(d) for d in documents]
    return at == sorted(at)


def verdicts(store: Seeded) -> dict[str, Counter[str]]:
    """How many valid verdicts of each scorer evalframe wrote onto each trace (those with none left out)."""
    counted = {t: Counter(a.name for a in found if a.valid) for t, found in feedbacks(store).items()}
    return {t: names for t, names in counted.items() if names}


_COMMON = {"what", "about", "tell", "question", "have", "with", "from", "train", "trains", "they", "your"}


def _words(text: str) -> set[str]:
    return {w.rstrip("s") for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) > 3 and w not in _COMMON}


def documents_for(query: str, k: int = 3) -> list[Document]:
    """The k documents sharing most words with the query, best first (ties: document order)."""
    ranked = sorted(range(len(DOCUMENTS)), key=lambda i: (-len(_words(query) & _words(DOCUMENTS[i])), i))
    return [
        Document(
            page_content=DOCUMENTS[i], metadata={"doc_uri": f"kb://{i}", "chunk_id": f"c{i}"}, id=f"d{i}"
        )
        for i in ranked[:k]
    ]


@mlflow.trace(span_type="RETRIEVER")
def retrieve(query: str) -> list[Document]:
    return documents_for(query)


@mlflow.trace(span_type="TOOL")
def weather(city: str) -> str:
    return f"Sunny in {city}"


@mlflow.trace(span_type="TOOL")
def convert_currency(amount: float, currency: str) -> float:
    return round(amount * 1.1, 2)


def calls_for(question: str) -> list[dict[str, Any]]:
    """The tool calls the app makes (and should make) for a question."""
    city = next((c for c in CITIES if c in question), None)
    if any(m in question for m in MONEY):
        return [{"name": "convert_currency", "arguments": {"amount": 30, "currency": "USD"}}]
    if city and "night" in question:
        return [{"name": "weather", "arguments": {"city": city}}]
    return []


@mlflow.trace
def answer(question: str) -> str:
    """The help desk: retrieve, call a tool when the question needs one, answer from the best document."""
    number = QUESTIONS.index(question) if question in QUESTIONS else 0
    docs = retrieve(question)
    for call in calls_for(question):
        (weather if call["name"] == "weather" else convert_currency)(**call["arguments"])
    mlflow.update_current_trace(
        tags={
            "env": "prod" if number % 2 == 0 else "staging",
            "team": "billing" if any(m in question for m in MONEY) else "travel",
        },
        session_id=f"session-{number // 3}",
    )
    if number % 6 == 5:
        raise ValueError("the help desk is closed for this question")
    return docs[0].page_content


@mlflow.trace
async def answer_async(question: str) -> str:
    """The help desk as a coroutine: an async application, traced the same way."""
    docs = retrieve(question)
    await asyncio.sleep(0.001)  # other calls run meanwhile: each must keep its own trace
    for call in calls_for(question):
        (weather if call["name"] == "weather" else convert_currency)(**call["arguments"])
    return docs[0].page_content


@contextlib.contextmanager
def logging_to(uri: str, experiment: str | None = None) -> Iterator[str | None]:
    """The app's MLflow logging to the store at `uri` (experiment `experiment`, made if missing; None:
    MLflow's default) for one block, then the process's tracking URI and active experiment as they
    were: a test leaves no MLflow state that would send another test's traces elsewhere. Yields the
    experiment's id."""
    from mlflow.tracking import fluent

    exported, active = os.environ.get("MLFLOW_TRACKING_URI"), fluent._active_experiment_id
    mlflow.set_tracking_uri(uri)
    try:
        experiment_id = None
        if experiment is not None:
            experiment_id = mlflow.set_experiment(experiment).experiment_id
        yield experiment_id
    finally:
        mlflow.set_tracking_uri(exported)  # type: ignore[arg-type]  # None: unset, as before
        fluent._active_experiment_id = active
        if active is None:
            os.environ.pop("MLFLOW_EXPERIMENT_ID", None)


def seed(uri: str, experiment: str = EXPERIMENT, artifacts: str | None = None) -> Seeded:
    """Ask every question into the store at `uri` (experiment `experiment`, its artifacts in the
    folder `artifacts`, else MLflow's default), then add the expectations and feedback."""
    client = mlflow.MlflowClient(uri)
    if client.get_experiment_by_name(experiment) is None:
        client.create_experiment(experiment, artifacts)
    with logging_to(uri, experiment) as experiment_id:
        assert experiment_id is not None
        seeded = Seeded(uri, experiment, experiment_id)
        for number, question in enumerate(QUESTIONS):
            with contextlib.suppress(ValueError):  # an ERROR trace, as the app's own callers see it
                answer(question)
            time.sleep(0.002)  # each trace its own millisecond: read back in the order asked
            trace_id = mlflow.get_last_active_trace_id()
            assert trace_id is not None
            seeded.ids.append(trace_id)
            (seeded.error if number % 6 == 5 else seeded.ok).append(trace_id)
            seeded.questions[trace_id] = question
            seeded.documents[trace_id] = documents_for(question)
            seeded.tool_calls[trace_id] = calls_for(question)
            for tag, value in (
                ("env", "prod" if number % 2 == 0 else "staging"),
                ("team", "billing" if any(m in question for m in MONEY) else "travel"),
            ):
                seeded.tags.setdefault(tag, {}).setdefault(value, []).append(trace_id)
        mlflow.flush_trace_async_logging()
        _assess(seeded)
        return seeded


def ask(uri: str, experiment: str, count: int) -> None:
    """Many traces for the benchmarks: the app asked `count` questions (QUESTIONS over and over, each
    asked a little differently) into the store at `uri`; no expectations or feedback."""
    with logging_to(uri, experiment):
        for i in range(count):
            with contextlib.suppress(ValueError):
                answer(f"{QUESTIONS[i % len(QUESTIONS)]} (asked {i} times)")
            if i % 200 == 199:  # MLflow's export queue drops the spans of traces beyond its size
                mlflow.flush_trace_async_logging()
        mlflow.flush_trace_async_logging()


def _assess(seeded: Seeded) -> None:
    person = AssessmentSource(source_type=AssessmentSourceType.HUMAN, source_id="reviewer@example.com")
    for trace_id in seeded.ok[:20]:
        source_document = seeded.documents[trace_id][0].page_content
        mlflow.log_expectation(
            trace_id=trace_id, name="expected_response", value=source_document, source=person
        )
        calls = seeded.tool_calls[trace_id]
        mlflow.log_expectation(trace_id=trace_id, name="expected_tool_calls", value=calls, source=person)
        seeded.expected.append(trace_id)
    for n, trace_id in enumerate(seeded.ok[:10]):
        mlflow.log_feedback(trace_id=trace_id, name="helpfulness", value=n / 9, source=person)
        seeded.rated.append(trace_id)
    judge = AssessmentSource(source_type=AssessmentSourceType.LLM_JUDGE, source_id="openai:/gpt-4o")
    mlflow.log_feedback(trace_id=seeded.ok[0], name="helpfulness", value=0.123, source=judge)
