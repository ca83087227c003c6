"""Graphs exported flat, for the backends that run them from files (ONNX Runtime, TensorRT, OpenVINO).

* :mod:`.names`: readable, unique names for the flat inputs and outputs;
* :mod:`.layout`: :class:`~.layout.IOLayout`, between a call's nested arguments and
  the flat tensors, and the flat outputs and what the module returns;
* :mod:`.flat`: the example call, the module seen flat, and ``torch.export`` of it with
  the graph's ranged axes;
* :mod:`.base`: :class:`~.base.ExportedGraphBackend`, the base class that keeps the
  layout and signature through builds and checkpoints.

Plugins import these names from :mod:`aitune_core.plugin_api.exported`.
"""
