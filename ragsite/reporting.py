"""Error reports without secrets: Django's technical 500 page (DEBUG, as in `make run`), the
admin error e-mails and anything else built by the exception reporter.

Django hides settings whose names look secret, but not the local variables of the frames a
traceback runs through: a failure inside a provider SDK shows its `api_key` argument and its
request headers (`Authorization: Bearer …`) in full. So the report is redacted by value: every
configured secret (provider keys, the secret key, database and storage passwords, tokens, the
tracing exporter's headers) and the password part of any URL is replaced wherever it appears, in
frame variables, settings, request data and exception messages alike.
"""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit

from django.conf import settings
from django.views import debug

SUBSTITUTE = "********************"
# scheme://user:password@host — the password part.
_URL_PASSWORD = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]*:)(?P<password>[^\s@/]+)(?P<tail>@)")
_SECRET_SETTINGS = (
    "SECRET_KEY", "DASHSCOPE_API_KEY", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "MILVUS_TOKEN",
    "RAG_WEB_SEARCH_API_KEY",
)
# Shorter values ("", "EMPTY", a test's "x") are not secrets worth hiding, and would blank out
# ordinary words of the report.
_MIN_SECRET_LENGTH = 8


def secret_values() -> list[str]:
    """The deployment's secrets, longest first (so one containing another is replaced whole)."""
    values = [getattr(settings, name, "") for name in _SECRET_SETTINGS]
    values += [database.get("PASSWORD") for database in settings.DATABASES.values()]
    values += list(getattr(settings, "SECRET_KEY_FALLBACKS", []))
    # The OTLP exporter's headers ("Authorization=Basic …"): each value, and its credential alone.
    for header in getattr(settings, "OTEL_EXPORTER_OTLP_HEADERS", "").split(","):
        value = unquote(header.partition("=")[2]).strip()
        values += [value, value.rpartition(" ")[2]]
    for url in (getattr(settings, "REDIS_URL", ""), getattr(settings, "MILVUS_URI", "")):
        try:
            values.append(urlsplit(url).password if url else None)
        except ValueError:
            continue
    found = {v for v in values if isinstance(v, str) and len(v) >= _MIN_SECRET_LENGTH}
    return sorted(found, key=len, reverse=True)


def redact(text: str, secrets: list[str] | None = None) -> str:
    for secret in secret_values() if secrets is None else secrets:
        if secret in text:
            text = text.replace(secret, SUBSTITUTE)
    return _URL_PASSWORD.sub(lambda m: f"{m['head']}{SUBSTITUTE}{m['tail']}", text)


def _redact_all(value, secrets: list[str]):
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, dict):
        return {k: _redact_all(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_all(v, secrets) for v in value]
    if isinstance(value, tuple):
        return tuple(_redact_all(v, secrets) for v in value)
    return value


class SafeExceptionReporterFilter(debug.SafeExceptionReporterFilter):
    """Django's, plus URL passwords in setting values (REDIS_URL, a cache LOCATION, …)."""

    def cleanse_setting(self, key, value):
        cleansed = super().cleanse_setting(key, value)
        return redact(cleansed) if isinstance(cleansed, str) else cleansed


class ExceptionReporter(debug.ExceptionReporter):
    """Django's, with every configured secret removed from the report's data (the frame
    variables are already printed to text there)."""

    def get_traceback_data(self):
        return _redact_all(super().get_traceback_data(), secret_values())
