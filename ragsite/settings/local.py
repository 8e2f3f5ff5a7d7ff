"""Embedded single-machine mode: SQLite, Milvus Lite, local files, the offline `local` provider."""

from .base import *  # noqa: F401,F403
from .base import env

DEBUG = env.bool("DJANGO_DEBUG", default=True)
# A throwaway key is fine on a laptop; production.py refuses to start without a real one.
SECRET_KEY = env("DJANGO_SECRET_KEY", default="local-only-insecure-key-do-not-deploy")
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"])

# SQLite, media and the Milvus Lite file live under var/; create it on first use.
for _directory in (VAR_DIR, VAR_DIR / "milvus", MEDIA_ROOT):  # noqa: F405
    _directory.mkdir(parents=True, exist_ok=True)
