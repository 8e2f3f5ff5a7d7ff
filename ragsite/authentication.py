"""Session authentication whose CSRF refusal has its own code (`csrf_failed`), on every API
view and on the SSE stream, so a client can tell "reload the page for a fresh token" from
"you may not do this"."""

from __future__ import annotations

from django.utils.translation import gettext as _
from rest_framework import authentication, exceptions


class CsrfFailed(exceptions.PermissionDenied):
    default_code = "csrf_failed"


class SessionAuthentication(authentication.SessionAuthentication):
    def enforce_csrf(self, request):
        try:
            super().enforce_csrf(request)
        except exceptions.PermissionDenied as exc:
            reason = str(exc.detail).removeprefix("CSRF Failed: ")
            raise CsrfFailed(_("CSRF 校验失败：%(reason)s") % {"reason": reason}, code="csrf_failed") from None
