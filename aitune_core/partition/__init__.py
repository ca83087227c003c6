"""Module-level partitioning: below a module that no compiled candidate takes, tune its submodules.

``tune(..., partition=True)`` (or ``config.partition``): when every compiled candidate of
a graph fails to build, fails validation or declines (a data-dependent op, see
:mod:`.data_dependent`), the module's children are recorded from the graph's own
samples and tuned in turn (:mod:`.descent`), descending into those that fail as well
down to ``config.partition_max_depth``. The graph is then served by a
:class:`~.backend.PartitionBackend`: the module's own forward on a shell whose tuned
children route to their backends (:mod:`.shell`), so the control flow between children
stays Python and the user's module is never changed. The summary and ``aitune inspect``
draw the partition as a tree; checkpoints keep it.
"""
