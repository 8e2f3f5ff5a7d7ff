"""A secret key of the installation's own, for the embedded single-machine mode.

A key written in the repository signs sessions, CSRF tokens and event-stream tokens the same way
on every checkout, so anybody who read the code could forge them. Instead, the first process to
start generates a random key and keeps it in a file only its owner can read; later processes
(and restarts) reuse it, so sessions survive a restart and web and worker agree.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured


def installation_secret_key(path: Path) -> str:
    """The key stored at `path`, generated there (mode 0600) when there is none yet."""
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    # Written whole under a temporary name, then linked into place: processes started together
    # (web, worker) never read a half-written key, and the one that links first wins.
    draft = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    descriptor = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w", encoding="ascii") as handle:
            handle.write(secrets.token_urlsafe(50) + "\n")
        try:
            os.link(draft, path)
        except FileExistsError:
            pass
    finally:
        draft.unlink(missing_ok=True)
    return _read(path)


def _read(path: Path) -> str:
    key = path.read_text(encoding="ascii").strip()
    if len(key) < 32:
        raise ImproperlyConfigured(
            f"{path} holds no usable secret key: delete it to have a new one generated, or set DJANGO_SECRET_KEY"
        )
    return key
