"""Checkpoints: save tuned modules, load and deploy them elsewhere without tuning again.

``aitune_core.save`` and ``aitune_core.load`` are the public entry points (defined in
:mod:`.save` and :mod:`.load`); :class:`~aitune_core.errors.CheckpointError` is what
they raise. Nothing is imported here: a module that needs the manifest, the file
checks or the signing code imports that module alone, without loading save and load
and everything they use (the module wrapper, partitioning, strategies).
"""
