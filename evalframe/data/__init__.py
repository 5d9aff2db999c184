"""Rows: the items to evaluate, read from files or given in memory, validated before any model call."""
