"""Scorers: the base classes (a user's own scorer subclasses `ItemScorer`), the judge forms, panels and
the built-in scorers, one module each."""

from evalframe.scorers.base import ItemScorer, Scorer

__all__ = ["ItemScorer", "Scorer"]
