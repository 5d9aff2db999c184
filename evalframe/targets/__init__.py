"""The system under test: recorded outputs, an LLM with a prompt template, a Python callable, an HTTP
service. The classes are named here as the config's `_target_` names them (evalframe.targets.HTTPTarget).

base: what a target is, and the recorded outputs; llm, python, http: one kind each.
"""

from evalframe.targets.base import RecordedOutput, Target
from evalframe.targets.http import HTTPTarget
from evalframe.targets.llm import LLMTarget
from evalframe.targets.python import PythonTarget

__all__ = ["HTTPTarget", "LLMTarget", "PythonTarget", "RecordedOutput", "Target"]
