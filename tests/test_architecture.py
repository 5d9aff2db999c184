"""The structure: packages by noun whose imports point down the data flow only, no import cycles between
modules (imports inside functions and under TYPE_CHECKING count too), each outside library that sets how
a run talks to the world behind exactly one door, and no file, class or function too long to read."""

from __future__ import annotations

import ast
from pathlib import Path

import evalframe

PACKAGE = Path(evalframe.__file__).parent

# The data flow, from the bottom: a package (or top-level module) may import only those on an earlier
# line, and its own modules. rows -> model calls -> results -> scorer steps and target outputs ->
# console / report / MLflow -> the run that drives them -> sweeps, then the ways in: API and CLI.
LAYERS = [
    "errors paths",  # exit codes and errors; where bundled files are, and the one atomic rewrite of a file
    "redaction",  # secrets kept out of files
    "data",  # rows from files or memory
    "models",  # the model door: settings, chat, embeddings, batches, cache, rate limits (litellm)
    "results",  # the nouns and what is computed from them: intervals, agreement, objective, gate, journal
    "config",  # composing conf/ outside the command line, and checking it
    "scorers",  # prompts (jinja2), the base classes, judge forms, panels, the built-in scorers
    "targets",  # the system under test
    "report",  # the console and the HTML reports
    "tracking",  # MLflow (mlflow)
    "run",  # the pipeline and its flow
    "sweep",  # the Hydra callback and the hold-out check
    "api",  # evaluate(): the Python API
    "cli",  # main(argv) -> int: the command line
    "pytest_plugin __init__ __main__",
]


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)


MODULES = {_module(p): p for p in PACKAGE.rglob("*.py")}


def package(module: str) -> str:
    """`scorers.judge` -> `scorers`; a top-level module is its own."""
    return module.split(".")[0]


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
                if node.module.startswith("evalframe")
                else [node.module]
            )
        for name in names:
            target = _target(name)
            if target is None:
                outside.add(name.split(".")[0])
            elif target != module:
                inside.add(target)
    return {"inside": inside, "outside": outside}


def test_every_package_has_a_place_in_the_flow() -> None:
    placed = {p for line in LAYERS for p in line.split()}
    assert sorted({package(m) for m in MODULES} - placed) == [], "add the new package to LAYERS"


def test_a_handful_of_modules_at_the_top() -> None:
    top = sorted(m for m in MODULES if "." not in m and not (PACKAGE / m).is_dir())
    assert top == ["__init__", "__main__", "errors", "paths", "pytest_plugin", "redaction"]


def test_imports_point_down_the_data_flow_only() -> None:
    layer = {p: i for i, line in enumerate(LAYERS) for p in line.split()}
    upward = [
        f"{m} ({package(m)}, line {layer[package(m)]}) imports {t} ({package(t)}, line {layer[package(t)]})"
        for m in MODULES
        for t in imports(m)["inside"]
        if package(t) != package(m) and layer[package(t)] >= layer[package(m)]
    ]
    assert not upward


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
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
    return cycles


def test_no_import_cycles_between_modules_or_packages() -> None:
    modules = {m: imports(m)["inside"] for m in MODULES}
    packages: dict[str, set[str]] = {}
    for m, targets in modules.items():
        packages.setdefault(package(m), set()).update(package(t) for t in targets if package(t) != package(m))
    assert _cycles(modules) == []
    assert _cycles(packages) == []


def test_litellm_mlflow_and_jinja2_each_have_one_door() -> None:
    doors = {
        lib: sorted({package(m) if lib != "jinja2" else m for m in MODULES if lib in imports(m)["outside"]})
        for lib in ("litellm", "mlflow", "jinja2")
    }
    assert doors == {"litellm": ["models"], "mlflow": ["tracking"], "jinja2": ["scorers.prompts"]}


def test_the_pipeline_reads_in_one_sitting() -> None:
    assert len(MODULES["run.pipeline"].read_text().splitlines()) <= 250


def test_tracking_prints_nothing() -> None:
    """Tracking hands back its warnings (notes) and where a run went; its callers print them."""
    printing = sorted(
        m
        for m in MODULES
        if package(m) == "tracking"
        and (
            "report.console" in imports(m)["inside"]
            or any(
                isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"
                for node in ast.walk(ast.parse(MODULES[m].read_text()))
            )
        )
    )
    assert printing == []


# Read in one sitting: a module, a class and a function each fit on a few screens.
LIMITS = {"module": 400, "class": 200, "function": 60}


def test_no_module_class_or_function_too_long_to_read() -> None:
    too_long = []
    for name, path in MODULES.items():
        text = path.read_text()
        if len(text.splitlines()) > LIMITS["module"]:
            too_long.append(f"module {name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            kind = "class" if isinstance(node, ast.ClassDef) else "function"
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > LIMITS[kind]:
                    too_long.append(f"{kind} {name}.{node.name}: {length} lines")
    assert too_long == []
