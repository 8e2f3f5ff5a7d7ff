"""The API's tokens as OpenAI clients send them.

The OpenAI SDKs send `Authorization: Bearer <key>`; ragsite's API clients send `Token <key>`.
Both name the same DRF token (`rest_framework.authtoken`), so an integration uses one key
everywhere. Without a token the views fall back to the session (with its CSRF check), as every
API view does; with neither the caller is anonymous and may ask public knowledge bases only,
exactly as on `/api/chat`.
"""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import TokenAuthentication, get_authorization_header


class BearerTokenAuthentication(TokenAuthentication):
    """DRF's TokenAuthentication, reading `Bearer <key>` as well as `Token <key>`."""

    keywords = ("Bearer", "Token")
    keyword = "Bearer"  # what the 401's WWW-Authenticate names: the scheme OpenAI clients use

    def authenticate(self, request):
        scheme = get_authorization_header(request).split(b" ", 1)[0].decode("latin-1").lower()
        if scheme not in {word.lower() for word in self.keywords}:
            return None  # another scheme (or none): not this authenticator's to refuse
        return self._authenticate_as(request, scheme)

    def _authenticate_as(self, request, scheme: str):
        # TokenAuthentication compares the header's first word with `self.keyword`: read the
        # header under the keyword it was sent with, on a copy, so the class stays stateless.
        reader = TokenAuthentication()
        reader.keyword = scheme
        return reader.authenticate(request)


class BearerTokenScheme(OpenApiAuthenticationExtension):
    """In the schema: HTTP bearer, the way OpenAI clients send the API's token."""

    target_class = BearerTokenAuthentication
    name = "bearerTokenAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer",
                "description": _("API 令牌（由管理员在后台创建），以 `Authorization: Bearer <令牌>`（OpenAI SDK 的写法）或 `Token <令牌>` 发送。")}
