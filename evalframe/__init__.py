"""evalframe: declarative, config-driven evaluation of LLM applications."""

__version__ = "0.1.0"
