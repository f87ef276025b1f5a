"""sha256 for small texts (stage keys, plan fingerprints, folder manifests) at no import cost (a leaf).

``hashlib`` loads OpenSSL (``_hashlib``: 2-3 ms, a tenth of a no-op build's own time); CPython's
built-in sha256 module is what ``hashlib`` itself falls back to, and gives the same digests. Big
files are still hashed with ``hashlib`` (OpenSSL is faster per byte): ``store/hashing.py``.
"""

from __future__ import annotations

try:
    from _sha256 import sha256  # CPython <= 3.11
except ImportError:  # pragma: no cover - the module's name on 3.12+, and any other Python
    try:
        from _sha2 import sha256
    except ImportError:
        from hashlib import sha256

__all__ = ["sha256", "sha256_hex"]


def sha256_hex(data: bytes) -> str:
    return sha256(data).hexdigest()
