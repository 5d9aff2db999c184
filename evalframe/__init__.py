"""evalframe: declarative, config-driven evaluation of LLM applications.

From Python: `from evalframe import evaluate` (see evalframe.api); from the shell: `python -m evalframe`.
"""

from evalframe.api import Evaluation, evaluate, evaluate_async

__version__ = "0.1.0"
__all__ = ["Evaluation", "__version__", "evaluate", "evaluate_async"]
