"""Evaluation runs: a policy played on worlds under its own run id, kept apart from the build's rows,
compared with confidence intervals, and its failures sorted into causes (see runs.py, stats.py, causes.py)."""
