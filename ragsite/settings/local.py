"""Embedded single-machine mode: SQLite, Milvus Lite, local files, the offline `local` provider."""

from ragsite.secret_key import installation_secret_key

from .base import *  # noqa: F401,F403
from .base import env

DEBUG = env.bool("DJANGO_DEBUG", default=True)
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"])

# SQLite, media and the Milvus Lite file live under var/; create it on first use.
for _directory in (VAR_DIR, VAR_DIR / "milvus", MEDIA_ROOT):  # noqa: F405
    _directory.mkdir(parents=True, exist_ok=True)

# DJANGO_SECRET_KEY when set; otherwise this installation's own random key, generated on first
# use under var/ and reused after (production.py refuses to start without DJANGO_SECRET_KEY).
SECRET_KEY = env("DJANGO_SECRET_KEY", default="").strip() or installation_secret_key(VAR_DIR / "secret_key")  # noqa: F405
