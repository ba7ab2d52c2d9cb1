"""Analyzers of a finished or crashed run: curves, detectors, failures, ranks and collectives, causes, the timeline."""
