"""The API docs speak the reader's language: `/api/schema/` and `/api/docs/` are Chinese by
default and English with `?lang=en` or `Accept-Language: en` (ragsite/openapi.py).

Every operation says what it does in a summary and a description, and every text of the schema
is translated: Chinese text in a Chinese schema, none in the English one (outside code spans,
which quote the API literally: `[来源 N]`, an example's keys).
"""

from __future__ import annotations

import json
import re

import pytest

CJK = re.compile(r"[\u4e00-\u9fff]")
CODE_SPAN = re.compile(r"`[^`]*`")
SCHEMA_JSON = "application/vnd.oai.openapi+json"
# drf-spectacular writes an enum's choices into its description ("* `dense` - dense"): no prose.
ENUM_CHOICES = re.compile(r"^(\* `[^`]*` - .*(\n|$))+$")


def schema_of(client, path="/api/schema/", **headers) -> dict:
    response = client.get(path, HTTP_ACCEPT=SCHEMA_JSON, **headers)
    assert response.status_code == 200, response.content[:500]
    return json.loads(response.content)


def operations(schema: dict):
    for path, methods in schema["paths"].items():
        for method, operation in methods.items():
            yield f"{method.upper()} {path}", operation


def texts(node, where=""):
    """(where, text) of every summary and description in the schema."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("summary", "description") and isinstance(value, str):
                yield f"{where}/{key}", value
            else:
                yield from texts(value, f"{where}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from texts(value, f"{where}[{index}]")


def prose(text: str) -> str:
    """The text outside code spans."""
    return CODE_SPAN.sub("", text)


@pytest.fixture
def chinese_schema(anonymous_api) -> dict:
    return schema_of(anonymous_api)


@pytest.fixture
def english_schema(anonymous_api) -> dict:
    return schema_of(anonymous_api, "/api/schema/?lang=en")


def test_every_operation_has_a_chinese_summary_and_description(chinese_schema):
    # given: the schema as a reader without a language preference gets it
    # when: each operation is read
    missing = [
        label for label, operation in operations(chinese_schema)
        if not CJK.search(operation.get("summary", "")) or not CJK.search(operation.get("description", ""))
    ]
    # then
    assert list(operations(chinese_schema)), "the schema has operations"
    assert missing == []


def test_every_parameter_is_described(chinese_schema, english_schema):
    for schema in (chinese_schema, english_schema):
        undescribed = [
            (label, parameter["name"]) for label, operation in operations(schema)
            for parameter in operation.get("parameters", []) if not parameter.get("description")
        ]
        assert undescribed == []


def test_every_text_of_the_chinese_schema_is_chinese(chinese_schema):
    # given: the default schema
    # when: every summary and description is read (the error responses, fields, tags, security)
    english = [
        (where, text) for where, text in texts(chinese_schema)
        if text and not CJK.search(text) and not ENUM_CHOICES.match(text)
    ]
    # then: nothing was left undocumented in English (a docstring or an untranslated help_text)
    assert english == []


def test_the_english_schema_describes_the_same_operations_in_english(chinese_schema, english_schema):
    # given: the same schema asked for with ?lang=en
    chinese = dict(operations(chinese_schema))
    english = dict(operations(english_schema))
    # then: the same operations, each with an English summary and description
    assert set(english) == set(chinese)
    for label, operation in english.items():
        assert operation["summary"] and not CJK.search(operation["summary"]), label
        assert operation["description"] and not CJK.search(prose(operation["description"])), label
        assert operation["summary"] != chinese[label]["summary"], label


def test_every_text_of_the_english_schema_is_english(english_schema):
    # when: every summary and description of the English schema is read
    chinese = [(where, text) for where, text in texts(english_schema) if CJK.search(prose(text))]
    # then: every msgid has its translation (Chinese is left only in quoted code)
    assert chinese == []


def test_the_api_description_and_tags_follow_the_language(chinese_schema, english_schema):
    assert "?lang=en" in chinese_schema["info"]["description"]
    assert "Authorization: Token" in english_schema["info"]["description"]
    assert not CJK.search(prose(english_schema["info"]["description"]))
    for schema in (chinese_schema, english_schema):
        declared = [tag["name"] for tag in schema["tags"]]
        used = {tag for _, operation in operations(schema) for tag in operation["tags"]}
        # every operation belongs to a declared, described group
        assert used <= set(declared), used - set(declared)
    assert "知识库" in [tag["name"] for tag in chinese_schema["tags"]]
    assert "Knowledge bases" in [tag["name"] for tag in english_schema["tags"]]


def test_error_responses_are_described_in_the_language(chinese_schema, english_schema):
    # given: a write that can answer most error statuses
    chinese = chinese_schema["paths"]["/api/knowledge-bases/"]["post"]["responses"]
    english = english_schema["paths"]["/api/knowledge-bases/"]["post"]["responses"]
    # then
    for status in ("400", "401", "403", "409", "413", "415", "503"):
        assert CJK.search(chinese[status]["description"]), status
        assert english[status]["description"] and not CJK.search(prose(english[status]["description"])), status


def test_accept_language_chooses_english_and_responses_vary_by_it(anonymous_api):
    # when: a client that prefers English asks without ?lang
    response = anonymous_api.get("/api/schema/", HTTP_ACCEPT=SCHEMA_JSON, HTTP_ACCEPT_LANGUAGE="en-US,en;q=0.9")
    # then: English, and caches keep the languages apart
    schema = json.loads(response.content)
    assert schema["paths"]["/api/retrieval/search"]["post"]["summary"] == "Search evidence"
    assert "Accept-Language" in response["Vary"]


def test_lang_wins_over_accept_language(anonymous_api):
    schema = schema_of(anonymous_api, "/api/schema/?lang=zh-hans", HTTP_ACCEPT_LANGUAGE="en")
    assert schema["paths"]["/api/retrieval/search"]["post"]["summary"] == "检索证据"


def test_the_chat_stream_is_described_in_the_language(chinese_schema, english_schema):
    chinese = chinese_schema["paths"]["/api/chat/stream"]["post"]
    english = english_schema["paths"]["/api/chat/stream"]["post"]
    assert chinese["summary"] == "提问（流式 SSE）" and english["summary"] == "Ask (streamed SSE)"
    assert chinese["tags"] == chinese_schema["paths"]["/api/chat"]["post"]["tags"]


def test_the_docs_page_renders_and_passes_the_language_on(anonymous_api):
    # when: the Swagger UI page, as is and asked for in English
    default = anonymous_api.get("/api/docs/")
    english = anonymous_api.get("/api/docs/?lang=en")
    # then: both render; without ?lang the browser's own Accept-Language picks the schema's language
    assert default.status_code == english.status_code == 200
    assert schema_url_of(default) == "/api/schema/"
    assert schema_url_of(english) == "/api/schema/?lang=en"


def schema_url_of(page) -> str:
    """The schema address the Swagger UI page loads (a JSON string in its script)."""
    match = re.search(r'^\s*url: (".*"),$', page.content.decode(), re.MULTILINE)
    assert match, "the page names its schema"
    return json.loads(match.group(1))
