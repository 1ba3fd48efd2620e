"""Grading one submission: the run, the pytest plugin, the submission fixture, checks, hints, the record."""
