"""What an unhandled failure looks like: JSON with a code under /api/, the HTML page elsewhere."""

from __future__ import annotations

import pytest
from django.db import OperationalError
from django.test import Client

pytestmark = pytest.mark.django_db


def _refusing_database(*args, **kwargs):
    # Not "too busy" (that is a 503 `server_busy`, tests/test_saturation.py): a failure nobody expected.
    raise OperationalError("server closed the connection unexpectedly")


def test_an_api_call_that_fails_unexpectedly_answers_the_json_error_shape(monkeypatch):
    # given: the database fails every query
    monkeypatch.setattr("knowledge.api.views.readable_knowledge_bases", _refusing_database)
    client = Client(raise_request_exception=False)
    # when
    response = client.get("/api/knowledge-bases/")
    # then
    assert response.status_code == 500
    assert response["Content-Type"].startswith("application/json")
    assert response.json() == {"code": "internal_error", "detail": "服务器内部错误，请稍后重试。"}
    assert "server closed" not in response.content.decode()


def test_a_page_that_fails_unexpectedly_is_the_html_error_page(monkeypatch):
    # given
    monkeypatch.setattr("chat.page.readable_knowledge_bases", _refusing_database)
    client = Client(raise_request_exception=False)
    # when
    response = client.get("/")
    # then
    assert response.status_code == 500
    assert response["Content-Type"].startswith("text/html")
