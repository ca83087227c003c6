"""Deploying a checkpoint where people serve: standalone artifacts written for a server by a deploy target.

:mod:`.target` holds the target contract (the lifecycle a target plugin fills in),
:mod:`.plan` what a checkpoint deploys as, :mod:`.export` the entry point behind
``ait.export`` and ``aitune export``, and :mod:`.triton` the Triton model repository target.
"""
