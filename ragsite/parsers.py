"""DRF's JSON parser, held to DATA_UPLOAD_MAX_MEMORY_SIZE and to the decoder every entry point
uses (`ragsite.jsontext`: no NaN, no nesting deeper than a request needs).

Django checks that limit when a view reads `request.body`, but DRF parses straight from the
request stream when nothing has read it yet, so a JSON body of any size would be decoded in
memory. The refusal is Django's RequestDataTooBig, which the API's exception handler answers
with 413 `request_too_large`. A body that is not such JSON is 400 `invalid_json`, as the
streaming views answer it.
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.utils.translation import gettext as _
from rest_framework import parsers
from rest_framework.exceptions import ParseError

from ragsite.jsontext import InvalidJson, parse_json


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        request = (parser_context or {}).get("request")
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if request is not None and limit is not None:
            try:
                length = int(request.META.get("CONTENT_LENGTH") or 0)
            except ValueError:
                length = 0
            if length > limit:
                raise RequestDataTooBig("Request body exceeded settings.DATA_UPLOAD_MAX_MEMORY_SIZE.")
        try:
            return parse_json(stream.read())
        except InvalidJson as exc:
            raise ParseError(_("请求体不是合法的 JSON：%(error)s") % {"error": exc}, code="invalid_json") from None
