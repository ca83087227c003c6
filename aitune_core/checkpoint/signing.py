"""Optional signing: an HMAC over the manifest, which holds the sha256 of every other file.

The manifest is what says which files a checkpoint has and what each must hash to, so
a keyed MAC over its exact bytes covers the whole checkpoint: change any file and its
hash no longer matches the manifest; change the manifest and the MAC no longer matches.
The signature lives beside the manifest in ``signature.json``. Keys are shared secrets
(bytes, or text taken as UTF-8); the key itself is never written anywhere.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path

from aitune_core.checkpoint.manifest import CheckpointError

SIGNATURE_NAME = "signature.json"
ALGORITHM = "hmac-sha256"
_MIN_KEY_BYTES = 16

SigningKey = bytes | str


def _key_bytes(key: SigningKey, role: str) -> bytes:
    raw = key.encode() if isinstance(key, str) else key
    if not isinstance(raw, bytes):
        raise TypeError(f"{role} must be bytes or str, got {type(key).__name__}")
    if len(raw) < _MIN_KEY_BYTES:
        raise ValueError(
            f"{role} is {len(raw)} bytes; use at least {_MIN_KEY_BYTES} random bytes "
            "(for example secrets.token_hex(32))"
        )
    return raw


def signature_of(manifest_bytes: bytes, key: SigningKey, role: str = "sign_key") -> str:
    return hmac.new(_key_bytes(key, role), manifest_bytes, hashlib.sha256).hexdigest()


def write_signature(root: Path, manifest_bytes: bytes, key: SigningKey) -> None:
    """Sign the manifest bytes just written to ``root``."""
    record = {"algorithm": ALGORITHM, "hmac": signature_of(manifest_bytes, key)}
    (root / SIGNATURE_NAME).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")


def is_signed(root: Path) -> bool:
    return (root / SIGNATURE_NAME).is_file()


def verify_signature(root: Path, manifest_bytes: bytes, key: SigningKey) -> None:
    """Refuse a checkpoint that is unsigned, or whose manifest is not the one ``key`` signed."""
    path = root / SIGNATURE_NAME
    if not path.is_file():
        raise CheckpointError(
            f"{root} is not signed ({SIGNATURE_NAME} is missing) and verify_key was given; "
            "refusing it. Sign checkpoints with aitune_core.save(..., sign_key=...)"
        )
    try:
        record = json.loads(path.read_text())
        algorithm, mac = record["algorithm"], record["hmac"]
    except (ValueError, KeyError, TypeError) as error:
        raise CheckpointError(f"{path} is not a valid signature record ({error}); refusing the checkpoint") from None
    if algorithm != ALGORITHM or not isinstance(mac, str):
        raise CheckpointError(f"{path} uses signature algorithm {algorithm!r}; only {ALGORITHM} is accepted")
    expected = signature_of(manifest_bytes, key, role="verify_key")
    if not hmac.compare_digest(expected, mac):
        raise CheckpointError(
            f"the signature of {root} does not match: the manifest was altered after signing, or it was signed "
            "with another key; refusing to load it"
        )
