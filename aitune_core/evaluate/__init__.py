"""Evaluating one candidate on one graph: the session it runs in, its result, and the run itself.

Strategies choose which candidates to try and which one wins; executors choose where
each try happens; this package is what a try is, the same wherever it runs:
:mod:`.session` (the graph and what all its candidates share), :mod:`.result` (one
row of the summary) and :mod:`.candidate` (build, validate, release).

Nothing is imported here: an executor's worker imports the module it needs.
"""
