"""`/api/schema/`: generated without a warning, valid OpenAPI, and saying what the API does
(tests/test_api_fuzz.py checks it against real responses)."""

from __future__ import annotations

import pytest
import yaml
from django.core.management import call_command


@pytest.fixture
def schema(tmp_path) -> dict:
    path = tmp_path / "schema.yaml"
    # --fail-on-warn: a warning (an enum name collision, a view spectacular cannot read) fails
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(path))
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def operations(schema: dict):
    for path, methods in schema["paths"].items():
        for method, operation in methods.items():
            yield f"{method.upper()} {path}", operation


def test_enums_have_their_own_names(schema):
    names = set(schema["components"]["schemas"])
    assert {"VersionStatusEnum", "DocumentStatusEnum", "MessageStatusEnum"} <= names
    assert not [name for name in names if name.startswith("Status") and name.endswith("Enum")]


def test_search_answers_an_array_of_results(schema):
    ok = schema["paths"]["/api/retrieval/search"]["post"]["responses"]["200"]
    assert ok["content"]["application/json"]["schema"] == {
        "type": "array", "items": {"$ref": "#/components/schemas/RetrievalResultOutput"},
    }


def test_every_operation_declares_its_errors_in_the_error_shape(schema):
    for label, operation in operations(schema):
        errors = {code: response for code, response in operation["responses"].items() if code >= "400"}
        assert "401" in errors, label
        # The OpenAI-compatible endpoints (integrations/openai) answer OpenAI's error shape.
        shape = "OpenAIError" if label.split(" ", 1)[1].startswith("/v1/") else "Error"
        for code, response in errors.items():
            assert response["content"]["application/json"]["schema"] == {"$ref": f"#/components/schemas/{shape}"}, (label, code)


def test_the_openai_compatible_endpoints_are_described(schema):
    paths = schema["paths"]
    completions = paths["/v1/chat/completions"]["post"]
    assert completions["description"] and {"400", "401", "404", "429", "503"} <= set(completions["responses"])
    assert paths["/v1/models"]["get"]["description"]
    assert "404" in paths["/v1/models/{model_id}"]["get"]["responses"]


def test_lists_are_pages(schema):
    lists = [label for label, operation in operations(schema) if "limit" in {p["name"] for p in operation.get("parameters", [])}]
    assert sorted(lists) == [
        "GET /api/chat/conversations",
        "GET /api/knowledge-bases/",
        "GET /api/knowledge-bases/{kb_id}/activations/",
        "GET /api/knowledge-bases/{kb_id}/documents/",
        "GET /api/knowledge-bases/{kb_id}/faqs/",
        "GET /api/knowledge-bases/{kb_id}/versions/",
    ]
    page = schema["components"]["schemas"]["PaginatedDocumentOutputList"]
    assert set(page["properties"]) == {"count", "next", "previous", "results"}


def test_the_chat_stream_is_described(schema):
    stream = schema["paths"]["/api/chat/stream"]["post"]
    assert "text/event-stream" in stream["responses"]["200"]["content"]
    assert {"400", "401", "403", "404", "415", "429"} <= set(stream["responses"])
