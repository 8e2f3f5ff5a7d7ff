"""Scale-out mode: every secret and endpoint comes from the environment, nothing defaults."""

from django.core.exceptions import ImproperlyConfigured

from .base import *  # noqa: F401,F403
from .base import env

DEBUG = False
SECRET_KEY = env("DJANGO_SECRET_KEY").strip()
# An empty or short key, or a comment an .env parser took for the value, would sign sessions
# and CSRF tokens with something anybody can guess.
if len(SECRET_KEY) < 32 or SECRET_KEY.startswith("#"):
    raise ImproperlyConfigured(
        "DJANGO_SECRET_KEY must be at least 32 characters of random text (not empty, not a comment); "
        'generate one with: python -c "import secrets; print(secrets.token_urlsafe(50))"'
    )
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS")

SESSION_COOKIE_SECURE = env.bool("DJANGO_SECURE_COOKIES", default=True)
CSRF_COOKIE_SECURE = env.bool("DJANGO_SECURE_COOKIES", default=True)
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_CONTENT_TYPE_NOSNIFF = True

STATIC_ROOT = env("STATIC_ROOT", default=str(VAR_DIR / "staticfiles"))  # noqa: F405
# Static files are collected at deploy time (`manage.py collectstatic`) and served hashed.
WHITENOISE_USE_FINDERS = env.bool("WHITENOISE_USE_FINDERS", default=False)
STORAGES = {
    **STORAGES,  # noqa: F405
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
