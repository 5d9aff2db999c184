"""evalframe: declarative, config-driven evaluation of LLM applications.

From Python: `from evalframe import evaluate` (see evalframe.api); from the shell: `python -m evalframe`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evalframe.api import Evaluation, evaluate, evaluate_async

__version__ = "0.1.0"
__all__ = ["Evaluation", "__version__", "evaluate", "evaluate_async"]


def __getattr__(name: str) -> Any:
    # The Python API on first use: `python -m evalframe` imports this package too, and the command
    # line (`--help` above all) does not need the API's modules.
    if name in ("Evaluation", "evaluate", "evaluate_async"):
        from evalframe import api

        return getattr(api, name)
    raise AttributeError(f"module 'evalframe' has no attribute {name!r}")
