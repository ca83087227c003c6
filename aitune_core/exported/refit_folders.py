"""Where a backend that rewrites its files on refit puts each refit's files.

ONNX Runtime and OpenVINO refit by writing the model again with the new weights and
loading that copy. Each refit writes into a fresh folder, since the artifact store may
hold the old files as hard links; the folder of the refit before is removed once the
new one serves. A backend built in this process writes beside its build; one restored
from a checkpoint has no build folder and writes into a private temporary one.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from pathlib import Path


class RefitFolders:
    """The folder each refit of one backend writes into, and the one its backend serves from now."""

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._serving: Path | None = None
        self._scratch: tempfile.TemporaryDirectory[str] | None = None

    def new(self, build_folder: Path | None) -> Path:
        """A fresh, empty folder: in ``build_folder`` when there is one, else in a private temporary one."""
        if build_folder is not None:
            folder = build_folder / f"refit-{uuid.uuid4().hex}"
            folder.mkdir(parents=True)
            return folder
        if self._scratch is None:
            self._scratch = tempfile.TemporaryDirectory(prefix=self._prefix, ignore_cleanup_errors=True)
        folder = Path(self._scratch.name) / uuid.uuid4().hex
        folder.mkdir()
        return folder

    def serve(self, folder: Path) -> None:
        """``folder`` is what serves now: remove the refit before it, which nothing serves from any more."""
        if self._serving is not None:
            shutil.rmtree(self._serving, ignore_errors=True)
        self._serving = folder
