"""The module structure: imports point down the data flow only, with no cycles (imports inside
functions and under TYPE_CHECKING count too), and each outside library that sets how a run talks to the
world has exactly one door."""

from __future__ import annotations

import ast
from pathlib import Path

import evalframe

PACKAGE = Path(evalframe.__file__).parent

# The data flow, from the bottom: a module may import only modules on an earlier line (modules on one
# line don't import each other). config -> rows -> target outputs -> scorer steps (render -> model ->
# validate) -> scores -> results -> console / report / MLflow, then the ways in: API, sweeps, CLI.
LAYERS = [
    "limits",  # a model's rate limits: pure bookkeeping, used by the retry policy and the model door
    "paths errors redaction retry",
    "results",  # the nouns: Row's results, steps, scores, items, the run, its objective
    "intervals",  # bootstrap intervals over items, paired differences
    "data agreement prompts cache local_embeddings",
    "llm",  # the model door: the only module importing litellm
    "batch",  # its batch API (through llm.lib)
    "context panel",
    "targets scorers",
    "scorers.grounded",  # the judge forms checked against retrieved contexts (claims, ranking)
    "scorers.reference scorers.answer_similarity scorers.answer_relevancy scorers.judge scorers.tool_calls "
    "scorers.context_ids "
    "scorers.semantic_similarity",
    "scorers.ground_truth_similarity",
    "objective journal summary gate flow",
    "jobs comparison",
    "report html_report",
    "tracking",  # the only module importing mlflow
    "pipeline config",
    "holdout",
    "rescore api sweep compare ui",
    "pytest_plugin __init__ __main__",
]


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)


MODULES = {_module(p): p for p in PACKAGE.rglob("*.py")}


def _target(name: str) -> str | None:
    """`evalframe.scorers.judge` -> `scorers.judge`; a name inside a module -> that module."""
    if name != "evalframe" and not name.startswith("evalframe."):
        return None
    short = name.removeprefix("evalframe").removeprefix(".") or "__init__"
    while short not in MODULES and "." in short:
        short = short.rsplit(".", 1)[0]
    return short if short in MODULES else "__init__"


def imports(module: str) -> dict[str, set[str]]:
    """Every evalframe module and outside package `module` imports, anywhere in the file."""
    inside, outside = set(), set()
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = (
                [f"{node.module}.{a.name}" for a in node.names]
                if node.module == "evalframe"
                else [node.module]
            )
        for name in names:
            target = _target(name)
            if target is None:
                outside.add(name.split(".")[0])
            elif target != module:
                inside.add(target)
    return {"inside": inside, "outside": outside}


def test_every_module_has_a_place_in_the_flow() -> None:
    placed = [m for line in LAYERS for m in line.split()]
    assert sorted(placed) == sorted(MODULES), "add the new module to LAYERS where it sits in the data flow"


def test_imports_point_down_the_data_flow_only() -> None:
    layer = {m: i for i, line in enumerate(LAYERS) for m in line.split()}
    upward = [
        f"{m} (line {layer[m]}) imports {t} (line {layer[t]})"
        for m in MODULES
        for t in imports(m)["inside"]
        if layer[t] >= layer[m]
    ]
    assert not upward


def test_no_import_cycles() -> None:
    graph = {m: imports(m)["inside"] for m in MODULES}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles: list[list[str]] = []

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                cycles.append([*path[path.index(t) :], t])
            elif t not in state:
                visit(t, [*path, t])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles


def test_litellm_mlflow_and_jinja2_each_have_one_door() -> None:
    doors = {
        lib: sorted(m for m in MODULES if lib in imports(m)["outside"])
        for lib in ("litellm", "mlflow", "jinja2")
    }
    assert doors == {"litellm": ["llm"], "mlflow": ["tracking"], "jinja2": ["prompts"]}


def test_the_pipeline_reads_in_one_sitting() -> None:
    assert len(MODULES["pipeline"].read_text().splitlines()) <= 250
