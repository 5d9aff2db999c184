"""The config outside the command line's own Hydra app: composing conf/ and checking it into plain data."""
