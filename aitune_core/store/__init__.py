"""The artifact store: what a candidate built and validated, kept to be loaded instead of built again.

A second ``tune()`` of the same model builds nothing it built before: each candidate
that passed validation is written to ``<config.cache_dir>/store`` under a key made of
everything its build depends on (:mod:`.key`), in the form checkpoints already use for
a backend (its ``to_dict()`` and its sealed, hashed artifacts, :mod:`.entry`). A later
candidate with the same key is restored from there by its installed class and
activated instead of built, then validated against eager and profiled like any other.

Entries are trusted as far as :mod:`.trust` says (this user's own runs, nothing else),
hash-checked as they are read, written atomically and evicted least recently used
first (:mod:`.store`).

Nothing is imported here: the evaluation pipeline and the ``aitune cache`` command
import the module they need.
"""
