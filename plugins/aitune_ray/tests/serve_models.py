"""The serving tests' models: the demo CNN tuned and saved, and the factory replicas build it with.

Replicas import this module (``serve_models:build_cnn``) through the ``PYTHONPATH`` the
served Ray's workers get, which holds the tests' ``sys.path`` and so this folder.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import socket
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from torch import nn

import aitune_core as ait
from aitune_core.testing.engine import DemoCNN, cnn_samples
from aitune_core.testing.timing import FAST_PROFILE

SIZES = [1, 2, 4, 8]


def build_cnn() -> nn.Module:
    """The factory: a fresh demo CNN in eval mode, as it was tuned (the checkpoint's weights replace its own)."""
    return DemoCNN().eval()


def not_a_model() -> object:
    return {"model": "no"}


def tuned_backend() -> ait.Backend:
    """ONNX Runtime where aitune-onnx is installed (a real compiled winner), else eager."""
    if importlib.util.find_spec("aitune_onnx") is not None:
        from aitune_onnx import ONNXRuntimeBackend

        backend: ait.Backend = ONNXRuntimeBackend()
        return backend
    return ait.TorchEagerBackend()


def tuned_cnn_checkpoint(
    folder: Path, name: str, backend: ait.Backend | None = None, threads: int = 1
) -> tuple[Path, nn.Module]:
    """The demo CNN tuned with ``backend`` (:func:`tuned_backend`) at batch 1 to 8 on ``threads`` threads, saved
    in ``folder``; and an eager copy of it."""
    torch.manual_seed(0)
    model = build_cnn()
    eager = copy.deepcopy(model)
    strategy = ait.OneBackendStrategy(backend or tuned_backend(), profile=FAST_PROFILE)
    wrapped = ait.Module(model, name, strategy=strategy)
    ait.tune(wrapped, cnn_samples(8), batch_sizes=SIZES, threads=threads)
    ait.save(wrapped, folder)
    return folder, eager


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the server binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def post(url: str, payload: Any, method: str = "POST") -> tuple[int, Any]:
    """The status and JSON answer of one request to ``url`` (a JSON body, or raw bytes)."""
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def post_all(url: str, payloads: list[Any]) -> list[tuple[int, Any]]:
    """Every payload sent at once, each on its own connection; answers in the payloads' order."""
    with ThreadPoolExecutor(max_workers=len(payloads)) as pool:
        return list(pool.map(lambda payload: post(url, payload), payloads))
