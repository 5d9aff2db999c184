"""The command line: `evalframe [run|rescore|log-run|compare|ui] ...`."""
