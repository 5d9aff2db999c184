"""A run, top to bottom: plan, execute as a continuous flow, aggregate, report, log."""
