"""Bundled demo models and the ``aitune demo`` run."""
