"""Where a candidate builds: a private folder named after what it is built from.

Two tuning runs on one machine can share ``config.cache_dir`` and a module name while
tuning different weights. Folders named after the module, graph and backend would let
the second run write over the first run's engine between its validation and its
``save``. So every build gets a folder of its own::

    <config.cache_dir>/builds/<identity>/<pid>-<random>/

* ``identity`` is a hash of the module's weights, the graph spec and the backend key:
  two folders with the same identity were built from the same inputs, whichever run
  made them, and a folder can be traced to what it was built from;
* the last part is made with ``mkdtemp`` (atomic, mode 0700), so no two builds, in one
  process or in two, ever write into the same folder.

Workers that do not share this machine's cache (a cluster worker's scratch folder)
get the same layout under their own folder.

A build folder lives as long as what serves from it
(:mod:`aitune_core.backends.folder_lifetime`): a candidate that lost loses its folder
when it is dropped, and a winner's stays until the tuned module goes (or the process
ends: finalizers run at exit). The pid that starts the last part names the process the
folder belongs to: a subprocess executor's child builds under its parent's pid
(:func:`build_for`), since the parent restores the winner from the child's folder after
the child has exited.
Folders whose process is gone are garbage, which the next run removes
(:mod:`aitune_core.store.eviction`); a live process's folders are never removed by
another process.

The weights fingerprint is a sha256 over every parameter and buffer: their names,
dtypes, shapes and bytes. It is exact (a sampled hash would give two fine-tunes that
differ in a few weights the same identity) and costs one read of the weights: about
1.2 GB/s on one CPU core (1 ms for the demo CNN, 90 ms for 100 MB of weights), plus the
copy to host memory for device tensors, one tensor at a time. It is computed once per
module per ``tune()`` (per graph in a worker), not per candidate.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import os
import tempfile
import weakref
from pathlib import Path
from typing import Any

import attrs
import torch

from aitune_core.config import config
from aitune_core.graphs.graph_spec import GraphSpec
from aitune_core.graphs.spec_data import GraphSpecData
from aitune_core.serialization import stable_hash

BUILDS = "builds"

_fingerprints: weakref.WeakKeyDictionary[object, tuple[int, str]] = weakref.WeakKeyDictionary()
"""``scope -> (id of the module, fingerprint)``: one hash per module per tuning scope."""


def weights_fingerprint(module: torch.nn.Module, scope: object | None = None) -> str:
    """sha256 of ``module``'s parameters and buffers, reused for as long as ``scope`` lives.

    scope: an object that lives exactly as long as the weights are known not to change
        (``tune()``'s module guard, which puts back any write a step makes). None: no reuse.
    """
    known = _fingerprints.get(scope) if _weakly_referable(scope) else None
    if known is not None and known[0] == id(module):
        return known[1]
    digest = hashlib.sha256()
    tensors = [*module.named_parameters(), *module.named_buffers()]
    for name, tensor in tensors:
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor_bytes(tensor))
    fingerprint = digest.hexdigest()
    if _weakly_referable(scope):
        _fingerprints[scope] = (id(module), fingerprint)
    return fingerprint


def _weakly_referable(scope: object | None) -> bool:
    if scope is None:
        return False
    try:
        weakref.ref(scope)
    except TypeError:
        return False
    return True


def tensor_bytes(tensor: torch.Tensor) -> Any:
    """The tensor's values as bytes; tensors without readable values count by their type only."""
    if tensor.device.type == "meta":
        return b"meta"
    try:
        flat = tensor.detach().to("cpu").contiguous().reshape(-1)
        if type(flat) is not torch.Tensor or flat.is_quantized:
            raise TypeError(type(tensor).__qualname__)
        # Read straight from memory: numpy is not a dependency of aitune-core.
        return ctypes.string_at(flat.data_ptr(), flat.numel() * flat.element_size())
    except (RuntimeError, TypeError, NotImplementedError):  # quantized or other tensor subclasses
        return f"unreadable {type(tensor).__qualname__}".encode()


def build_identity(weights: str, graph: GraphSpec, backend_key: str) -> str:
    """The hash that names the builds of ``backend_key`` for ``graph`` of a module with ``weights``."""
    spec = attrs.asdict(GraphSpecData.of(graph))
    return stable_hash({"weights": weights, "graph": spec, "backend": backend_key}, length=24)


def builds_root(session_dir: Path) -> Path:
    """The ``builds`` folder for a session whose own folder is ``session_dir``.

    Tuning gives each graph a folder under ``config.cache_dir``; builds then go to the
    cache's one ``builds`` folder. A worker that tunes in a folder of its own (outside
    this process's ``config.cache_dir``) builds under that folder.
    """
    cache = config.cache_dir.expanduser().absolute()
    folder = session_dir.expanduser().absolute()
    return (cache if folder.is_relative_to(cache) else folder) / BUILDS


def claim_build_folder(root: Path, identity: str) -> Path:
    """A new, empty folder under ``root/identity`` that no other build will ever use, named after its owner's pid."""
    parent = root / identity
    attempts = 0
    while True:
        parent.mkdir(parents=True, exist_ok=True)
        try:
            return Path(tempfile.mkdtemp(prefix=f"{owner_pid()}-", dir=parent))
        except FileNotFoundError:  # another process removed the emptied parent in between
            attempts += 1
            if attempts == 3:
                raise


# ---------------------------------------------------------------------- ownership
_owner: int | None = None
"""The pid this process names its build folders after, when that is not its own (:func:`build_for`)."""


def build_for(pid: int) -> None:
    """Name this process's build folders after ``pid``, the tuning process that owns them, and tie none.

    A subprocess executor's child calls it: its parent restores the winner from the
    child's folder once the child has exited, so the folder must count as the parent's
    (a live process) in every other process's eyes, and the parent removes the rest.
    """
    global _owner
    _owner = pid


def building_for_another() -> bool:
    """Whether this process builds for another (:func:`build_for`): then it ties no folder, its owner cleans up."""
    return _owner is not None


def owner_pid() -> int:
    """The pid that names this process's build folders: its own, or its owner's (:func:`build_for`)."""
    return _owner if _owner is not None else os.getpid()


def folder_owner(name: str) -> int | None:
    """The pid a folder named ``<pid>-<random>`` belongs to; None for a name without one."""
    head = name.split("-", 1)[0]
    return int(head) if head.isdigit() else None


# ---------------------------------------------------------------------- a full disk
def disk_full_reason(error: BaseException, folder: Path | None = None) -> str | None:
    """What to tell the user when ``error`` is a full disk (ENOSPC, EDQUOT): where, and the ways out; else None.

    folder: what was being written, when the error does not name a file.
    """
    if not isinstance(error, OSError) or error.errno not in (errno.ENOSPC, errno.EDQUOT):
        return None
    if error.filename:
        folder = Path(os.fsdecode(error.filename))
    folder = folder if folder is not None else config.cache_dir
    return (
        f"no space left on the disk holding {folder} ({error.strerror or 'disk full'}): free space there, "
        f"lower config.cache_max_mb (AITUNE_CACHE_MAX_MB, now {config.cache_max_mb} MiB) so the cache keeps "
        "less, or set config.cache_dir (AITUNE_CACHE_DIR) to a folder on a larger disk"
    )
