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
# HTTPS only, as `manage.py check --deploy` asks. Plain HTTP is redirected (paths matching
# DJANGO_SECURE_REDIRECT_EXEMPT, regular expressions without the leading slash, are not: a load
# balancer's health check, say). HSTS makes browsers refuse plain HTTP for a year, this host and
# its subdomains; `preload` only takes effect once the domain is submitted to the browsers'
# preload list. Lower or switch these off (0 / false) before HTTPS works everywhere they reach.
SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=True)
SECURE_REDIRECT_EXEMPT = env.list("DJANGO_SECURE_REDIRECT_EXEMPT", default=[])
SECURE_HSTS_SECONDS = env.int("DJANGO_SECURE_HSTS_SECONDS", default=365 * 24 * 3600)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", default=True)
SECURE_HSTS_PRELOAD = env.bool("DJANGO_SECURE_HSTS_PRELOAD", default=True)

STATIC_ROOT = env("STATIC_ROOT", default=str(VAR_DIR / "staticfiles"))  # noqa: F405
# Static files are collected at deploy time (`manage.py collectstatic`) and served hashed.
WHITENOISE_USE_FINDERS = env.bool("WHITENOISE_USE_FINDERS", default=False)
STORAGES = {
    **STORAGES,  # noqa: F405
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
