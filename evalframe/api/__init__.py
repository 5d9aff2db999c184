"""`from evalframe import evaluate`: run an evaluation from Python, through the CLI's own pipeline.

The arguments become the config `python -m evalframe` would compose (the same `conf/` groups and
defaults, composed with Hydra), and what only code can hand over — a function as the target, scorer
objects, rows in memory — goes to `planning.plan` as it is. So checks, journal, cache, scores and MLflow
logging are the CLI's, byte for byte.

    result = evaluate(rows, ["answer_similarity", "token_f1"], target=my_agent, model="gpt")
    result.mean("answer_similarity"), result.items, result.run_id
"""

from evalframe.api.entry_points import evaluate, evaluate_async
from evalframe.api.evaluation import Evaluation

__all__ = ["Evaluation", "evaluate", "evaluate_async"]
