"""The system under test: recorded outputs, an LLM with a prompt template, a Python callable, an HTTP
service."""

from evalframe.targets.kinds import HTTPTarget, LLMTarget, PythonTarget, RecordedOutput, Target

__all__ = ["HTTPTarget", "LLMTarget", "PythonTarget", "RecordedOutput", "Target"]
