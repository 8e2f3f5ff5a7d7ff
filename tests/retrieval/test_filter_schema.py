"""`/api/schema/` describes metadata filters (retrieval, chat) and documents' attributes
(upload, PATCH, output)."""

from __future__ import annotations

import pytest
import yaml
from django.core.management import call_command


@pytest.fixture
def schema(tmp_path) -> dict:
    """The schema as `manage.py spectacular` writes it, failing on any warning."""
    path = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(path))
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def component(schema: dict, ref: dict) -> dict:
    return schema["components"]["schemas"][ref["$ref"].rsplit("/", 1)[1]]


def test_retrieval_and_chat_take_a_list_of_filters(schema):
    for body in ("RetrievalRequestInputRequest", "ChatRequestInputRequest"):
        filters = schema["components"]["schemas"][body]["properties"]["filters"]
        assert filters["type"] == "array" and "最多 10 个" in filters["description"]
        one = component(schema, filters["items"])
        assert set(one["properties"]) == {"field", "op", "value", "gte", "lte"}
        assert one["required"] == ["field", "op"]
        assert "attributes.<键>" in one["properties"]["field"]["description"]
        assert component(schema, one["properties"]["op"]["allOf"][0])["enum"] == ["eq", "in", "range"]


def test_the_trace_declares_the_filters_it_applied(schema):
    trace = schema["components"]["schemas"]["RetrievalTraceOutput"]["properties"]
    assert {"filters", "filter_admitted_count", "filter_ready_count"} <= set(trace)
    assert component(schema, trace["filters"]["items"])["properties"]["op"]


def test_documents_declare_their_attributes_in_and_out(schema):
    components = schema["components"]["schemas"]
    output = components["DocumentOutput"]["properties"]["attributes"]
    assert output["type"] == "object" and output["maxProperties"] == 50
    assert {"type": "array", "items": {"type": "string"}} in output["additionalProperties"]["oneOf"]
    assert "attributes" in components["DocumentUploadInputRequest"]["properties"]
    patch = schema["paths"]["/api/knowledge-bases/{kb_id}/documents/{document_id}/"]["patch"]
    body = component(schema, patch["requestBody"]["content"]["application/json"]["schema"])
    assert set(body["properties"]) == {"attributes"}
    assert {"200", "400", "403", "404"} <= set(patch["responses"])
