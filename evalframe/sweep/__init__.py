"""Sweeps: the Hydra callback (parent run, ranked table) and the hold-out check of the best settings."""
