"""Which entries the store may load: only those this user's own tune runs wrote here.

Stored artifacts can be native code (an AOT Inductor package holds a shared library
whose constructors run when it is loaded). A checkpoint, which may come from anywhere,
runs such code only with ``trust_native_code=True``. The store is not a checkpoint: it
is the user's own cache, filled by the user's own runs, the same trust Inductor gives
its own on-disk cache of compiled libraries. The rule that keeps it that way:

* the store folder is made private (mode 0700), and an entry is used only when its
  folder and every file in it belong to this user and no other user may write them;
* every entry is signed with an HMAC under a secret that only this store holds
  (``<store>/secret``, mode 0600, made at the first write), so an entry copied in from
  another cache, another machine or another user is refused as foreign;
* every artifact's sha256 and size are checked as it is copied out (see :mod:`.entry`),
  so a file changed after it was written is refused.

Whoever can write as this user into this folder could also change Inductor's cache or
the installed packages: the rule does not defend against that user, and says so.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from pathlib import Path

SECRET_NAME = "secret"
_SECRET_BYTES = 32


class ForeignEntryError(ValueError):
    """An entry this store may not load: written by someone else, or open to other users' writes."""


def private_folder(path: Path) -> Path:
    """``path`` as a folder only this user may enter (created if missing)."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if hasattr(os, "getuid") and path.stat().st_uid == os.getuid():
        path.chmod(0o700)
    return path


def check_owned(path: Path) -> None:
    """Refuse ``path`` (a file or folder of an entry) unless this user owns it and no one else may write it."""
    if not hasattr(os, "getuid"):  # no owners to check (Windows): the user's profile folder protects it
        return
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode):
        raise ForeignEntryError(f"{path} is a symbolic link; entries hold plain files only")
    if info.st_uid != os.getuid():
        raise ForeignEntryError(f"{path} belongs to user id {info.st_uid}, not to this user ({os.getuid()})")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ForeignEntryError(f"{path} may be written by other users (mode {stat.filemode(info.st_mode)})")


def secret(root: Path, create: bool) -> bytes | None:
    """The store's signing secret; made (mode 0600) when ``create`` and there is none yet."""
    path = root / SECRET_NAME
    if not path.exists():
        if not create:
            return None
        private_folder(root)
        staged = root / f".{SECRET_NAME}-{os.getpid()}-{secrets.token_hex(4)}"
        descriptor = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(secrets.token_bytes(_SECRET_BYTES))
        try:
            os.link(staged, path)  # the first writer's secret wins; every other run reads that one
        except FileExistsError:
            pass
        finally:
            staged.unlink()
    check_owned(path)
    if path.stat().st_mode & (stat.S_IRGRP | stat.S_IROTH) and hasattr(os, "getuid"):
        raise ForeignEntryError(f"{path} may be read by other users; remove it (a new secret is made)")
    value = path.read_bytes()
    if len(value) != _SECRET_BYTES:
        raise ForeignEntryError(f"{path} is not a store secret ({len(value)} bytes)")
    return value


def signature(key: bytes, record: bytes) -> str:
    return hmac.new(key, record, hashlib.sha256).hexdigest()


def check_signature(key: bytes | None, record: bytes, stored: str) -> None:
    if key is None or not hmac.compare_digest(signature(key, record), stored.strip()):
        raise ForeignEntryError("its signature is not this store's: it was not written by this user's tune runs here")
