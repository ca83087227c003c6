"""The OpenVINO IR a backend serves, described as a standalone artifact for deploy targets.

``model.xml`` (the graph) and ``model.bin`` (its weights) run in any OpenVINO runtime,
Triton's OpenVINO backend included, with no aitune and none of the model's code. The
IR's ports carry the names aitune gave the flat tensors (:func:`aitune_openvino.convert`
names them from the layout), so the names come from the layout; each gets the graph's
recorded dtype, shape range and batch axis. The compile settings it was validated and
timed with (performance hint, threads, inference precision) go with it.
"""

from __future__ import annotations

from pathlib import Path

from aitune_core.plugin_api import GraphSpec
from aitune_core.plugin_api.deploy import Deployable, NoDeployable, RuntimeOptions, flat_io
from aitune_core.plugin_api.exported import IOLayout
from aitune_openvino.config import OpenVINOConfig
from aitune_openvino.runtime import resolve_hint

XML_FILE = "model.xml"
BIN_FILE = "model.bin"
PRECISIONS = {"f32": "fp32", "bf16": "bf16", "f16": "fp16"}


def openvino_deployable(
    owner: str,
    config: OpenVINOConfig,
    files: tuple[Path | None, Path | None],
    layout: IOLayout | None,
    graph: GraphSpec,
) -> Deployable | NoDeployable:
    """The IR ``owner`` serves ``graph`` from; ``files`` are its ``.xml`` and ``.bin``."""
    xml, weights = files
    if xml is None or weights is None or not xml.is_file() or not weights.is_file():
        return NoDeployable(f"{owner} has no IR files; build it or restore it from a checkpoint")
    try:
        inputs, outputs = flat_io(layout, graph)
    except ValueError as error:
        return NoDeployable(f"{owner}: {error}")
    batch_range = graph.batch_range
    hint = resolve_hint(config, None if batch_range is None else batch_range[1])
    precision = "fp16" if config.compress_to_fp16 and config.inference_precision == "f32" else None
    runtime = RuntimeOptions(
        device="cpu",
        threads=config.num_threads,
        precision=precision or PRECISIONS[config.inference_precision],
        settings={"performance_hint": hint},
    )
    return Deployable("openvino_ir", {XML_FILE: xml, BIN_FILE: weights}, XML_FILE, inputs, outputs, runtime)
