"""A launcher's Hub token, sealed at rest for the host worker that hands it to the engine.

Encrypted, not hashed: the worker must give the engine the token itself (HF_TOKEN), so a
one-way hash would be useless. Fernet (AES-128-CBC + HMAC-SHA256) with a key derived from
SECRET_KEY by HKDF, which web and host workers already share (see `engine_api_key`); the
database alone (a dump, a backup, a read-only replica) does not reveal the token. The sealed
value is wiped when the deployment ends, and is never logged nor put in an audit row.
"""

from __future__ import annotations

import base64
import logging

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

log = logging.getLogger(__name__)
_INFO = b"shardboard deployment hub token v1"


def _fernet() -> Fernet:
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(
        settings.SECRET_KEY.encode()
    )
    return Fernet(base64.urlsafe_b64encode(key))


def seal(token: str) -> str:
    return _fernet().encrypt(token.encode()).decode() if token else ""


def unseal(sealed: str, *, deployment_id: int | None = None, what: str = "") -> str:
    """The token, or "" when there is none or it cannot be opened (SECRET_KEY changed)."""
    if not sealed:
        return ""
    try:
        return _fernet().decrypt(sealed.encode()).decode()
    except InvalidToken:
        owner = what or f"deployment {deployment_id}'s Hub token"
        log.warning("%s cannot be opened (SECRET_KEY changed?)", owner)
        return ""
