"""Schemathesis against the live `/api/schema/`: every operation, fed generated valid and invalid
requests, on a site with real data (a public knowledge base whose documents went through real
ingestion into Milvus Lite, FAQs, a conversation with evidence), as an anonymous caller and as a
superuser with a token.

Checks: no 5xx, every status code is declared, every response body matches its declared schema
(and declares every field it returns: a field the schema does not name is a lie by omission), and
its content type is the declared one.

Bounded and deterministic: derandomized generation, no example database, a few examples per
operation and mode, no shrinking. The schema is loaded from the app and called in-process over
ASGI, as daphne serves it (the SSE stream is an async view).
Hypothesis drives schemathesis's strategies directly (`operation.as_strategy`): its pytest
loader for fixture-built schemas (`schemathesis.pytest.from_fixture`) does not run on pytest 9.2.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from types import SimpleNamespace

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given
from hypothesis import settings as hypothesis_settings
from hypothesis.errors import Unsatisfiable
from hypothesis import strategies as st
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.asgi import get_asgi_application
from rest_framework.authtoken.models import Token
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from chat.contracts import ChatQuery, Requester
from chat.pipeline.rag import RAGService
from knowledge.catalog import services as catalog_services
from knowledge.documents import services as document_services
from knowledge.faqs import services as faq_services
from knowledge.models import Chunk, DocumentAsset, KnowledgeBaseVersion, Visibility
from tests.chat.conftest import DOCUMENTS, FAQ_QUESTION, FAQS, GREETING, OFF_TOPIC_QUESTION, RAG_QUESTION
from tests.conftest import make_kb
from tests.docparse.factories import PdfPicture, PdfText, build_pdf, encode, picture

WARRANTY_PDF = build_pdf([[
    PdfText("产品保修说明", 72, 760, 20),
    PdfText("星河X3 路由器的保修期为 24 个月，保修期内免费维修。", 72, 720, 12),
    PdfPicture(encode(picture((300, 200)), "JPEG"), 300, 200, 72, 400, 150, 100),
    PdfText("图1 星河X3 外观", 72, 385, 10),
]])

# Reads that must reach real data (as well as the known-good questions below).
REACHED = ("GET /api/knowledge-bases/{kb_id}/documents/", "GET /api/chunks/{chunk_id}/preview", "GET /api/assets/{asset_id}")
QUESTIONS = (RAG_QUESTION, FAQ_QUESTION, GREETING, OFF_TOPIC_QUESTION, "星河X3 的保修期和外观？")

# Per operation and generation mode (positive, negative): 33 operations x 2 modes x 2 callers.
MAX_EXAMPLES = 10
CALLERS = ("anonymous", "superuser")
HYPOTHESIS = hypothesis_settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: the first failing request is reported
    suppress_health_check=list(HealthCheck),
)


@pytest.fixture
def unthrottled(settings):
    # The limits have their own tests; here they would turn most calls into 429 after a few.
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {}}


@pytest.fixture(params=CALLERS)
def caller_headers(request, staff_user) -> dict[str, str]:
    if request.param == "anonymous":
        return {}
    return {"Authorization": f"Token {Token.objects.create(user=staff_user).key}"}


@pytest.fixture
def site_with_data(milvus, run_tasks, media_root, staff_user, unthrottled) -> SimpleNamespace:
    """A public knowledge base with an active version, documents, FAQs and a conversation with
    evidence; `path` holds real values for the schema's path parameters."""
    kb = make_kb(visibility=Visibility.PUBLIC, actor=staff_user)
    for faq in FAQS:
        faq_services.save_faq(kb=kb, actor=staff_user, **faq)
    uploads = [SimpleUploadedFile(name, text.encode()) for name, text in DOCUMENTS.items()]
    document_services.upload_documents(kb=kb, actor=staff_user, files=[*uploads, SimpleUploadedFile("保修说明.pdf", WARRANTY_PDF)])
    version = KnowledgeBaseVersion.objects.get(knowledge_base=kb)
    assert version.status == "ready", [(d.title, d.status, d.error_code) for d in version.documents.all()]
    catalog_services.activate_version(version=version, actor=staff_user, reason="fuzz")
    kb.refresh_from_db()
    answered = RAGService().answer(
        query=ChatQuery(knowledge_base_id=kb.slug, question=RAG_QUESTION), requester=Requester(user=staff_user)
    )
    # The PDF's: it has a page region to preview and an image asset.
    chunk = Chunk.objects.filter(document__knowledge_base=kb, document__file_type="pdf").order_by("id").first()
    asset = DocumentAsset.objects.get(document__knowledge_base=kb)
    return SimpleNamespace(
        kb_slug=kb.slug,
        path={
            "kb_id": kb.slug,
            "number": kb.active_version.number,
            "document_id": chunk.document_id,
            "faq_id": kb.faqs.order_by("id").first().pk,
            "chunk_id": chunk.pk,
            "asset_id": asset.pk,
            "conversation_id": str(answered.conversation_id),
        },
    )


def resolver(raw: dict):
    """Follow local `$ref`s of the OpenAPI document `raw`."""

    def resolve(schema: dict) -> dict:
        while "$ref" in schema:
            node = raw
            for part in schema["$ref"].removeprefix("#/").split("/"):
                node = node[part]
            schema = node
        return schema

    return resolve


def undeclared_fields(body, schema: dict, resolve) -> list[str]:
    """Paths of object keys in `body` that its schema does not name (where it names them)."""
    schema = resolve(schema)
    found: list[str] = []
    for option in schema.get("allOf", []) + schema.get("oneOf", []) + schema.get("anyOf", []):
        option = resolve(option)
        if option.get("type") == "object" or "properties" in option:
            schema = {**schema, "properties": {**schema.get("properties", {}), **option.get("properties", {})}}
    if isinstance(body, dict) and "properties" in schema and "additionalProperties" not in schema:
        for key, value in body.items():
            if key not in schema["properties"]:
                found.append(key)
            else:
                found += [f"{key}.{inner}" for inner in undeclared_fields(value, schema["properties"][key], resolve)]
    elif isinstance(body, list) and "items" in schema:
        for item in body:
            found += [f"[].{inner}" for inner in undeclared_fields(item, schema["items"], resolve)]
    return found


@schemathesis.check
def declares_every_field(ctx, response, case):
    if response.status_code >= 500 or "json" not in (response.headers.get("content-type") or [""])[0]:
        return None
    raw = case.operation.schema.raw_schema
    declared = raw["paths"][case.operation.path][case.method.lower()]["responses"].get(str(response.status_code))
    if declared is None:
        return None  # status_code_conformance reports it
    body_schema = declared.get("content", {}).get("application/json", {}).get("schema")
    if body_schema is None:
        if response.content:
            raise AssertionError(f"{response.status_code} has a JSON body but declares none")
        return None
    missing = undeclared_fields(response.json(), body_schema, resolver(raw))
    if missing:
        raise AssertionError(f"{response.status_code} returns fields its schema does not declare: {missing}")
    return None


def test_the_field_check_finds_fields_the_schema_does_not_name():
    # given: a nullable nested component (spectacular's allOf + nullable) in a list
    raw = {"components": {"B": {"type": "object", "properties": {"x": {"type": "integer"}}}}}
    schema = {"type": "array", "items": {
        "type": "object", "properties": {"a": {"allOf": [{"$ref": "#/components/B"}], "nullable": True}},
    }}
    # when
    found = undeclared_fields([{"a": {"x": 1, "y": 2}, "b": 3}, {"a": None}], schema, resolver(raw))
    # then
    assert found == ["[].a.y", "[].b"]


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    declares_every_field,
]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_every_operation_answers_as_its_schema_says(site_with_data, caller_headers):
    # given: the site with data, one caller, the schema as the app serves it
    schema = schemathesis.openapi.from_asgi("/api/schema/", get_asgi_application())
    operations = [result.ok() for result in schema.get_all_operations()]
    failures: dict[str, str] = {}
    statuses: dict[str, Counter] = defaultdict(Counter)
    # when: each operation gets generated requests, valid and invalid
    for operation in operations:
        path = {name: value for name, value in site_with_data.path.items() if "{" + name + "}" in operation.path}
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            strategy = operation.as_strategy(generation_mode=mode, path_parameters=path)

            @HYPOTHESIS
            @given(case=strategy, real_kb=st.booleans(), question=st.none() | st.sampled_from(QUESTIONS))
            def call(case, real_kb, question):
                # A random knowledge base id only ever finds nothing, and a random question mostly
                # nothing to answer: half the time the request names the real ones.
                if real_kb and isinstance(case.body, dict) and "knowledge_base_id" in case.body:
                    case.body["knowledge_base_id"] = site_with_data.kb_slug
                    if question is not None:
                        case.body["question"] = question
                if real_kb and "knowledge_base_id" in (case.query or {}):
                    case.query["knowledge_base_id"] = site_with_data.kb_slug
                response = case.call_and_validate(headers=caller_headers, checks=CHECKS)
                code = response.json().get("code", "") if response.status_code >= 400 and response.content else ""
                statuses[operation.label][f"{response.status_code} {code}".strip()] += 1
                if operation.label == "POST /api/retrieval/search" and response.status_code == 200 and response.json():
                    statuses[operation.label]["results"] += 1

            try:
                call()
            except Unsatisfiable:
                pass  # negative mode with nothing to negate: the path is fixed and there is no other input
            except (Exception, BaseExceptionGroup) as exc:  # collected: one run reports every failing operation
                failures[f"{mode.value} {operation.label}"] = str(exc)[:3000]
    # and: one plain, valid request per operation that must reach the data. Generated requests
    # do so only by chance, and what they generate depends on the ids the process hands out.
    question = {"knowledge_base_id": site_with_data.kb_slug, "question": RAG_QUESTION}
    known_good = {"POST /api/retrieval/search": question, "POST /api/chat": question, "POST /api/chat/stream": question,
                  "POST /v1/chat/completions": {"model": site_with_data.kb_slug,
                                                "messages": [{"role": "user", "content": RAG_QUESTION}]}}
    for operation in operations:
        path = {name: value for name, value in site_with_data.path.items() if "{" + name + "}" in operation.path}
        if operation.label not in known_good and operation.label not in REACHED:
            continue
        body = {"body": known_good[operation.label], "media_type": "application/json"} if operation.label in known_good else {}
        response = operation.Case(path_parameters=path, **body).call_and_validate(headers=caller_headers, checks=CHECKS)
        statuses[operation.label][str(response.status_code)] += 1
        if operation.label == "POST /api/retrieval/search" and response.status_code == 200 and response.json():
            statuses[operation.label]["results"] += 1
    # then: every response was declared and matched its declaration
    print("\n".join(f"{label}: {dict(counts)}" for label, counts in statuses.items()))
    assert not failures, "\n\n".join(f"{label}\n{message}" for label, message in failures.items())
    # and the requests reached the data, not only validation errors and 404s
    assert statuses["POST /api/retrieval/search"]["results"] > 0
    assert statuses["POST /api/chat"]["200"] > 0
    assert statuses["POST /api/chat/stream"]["200"] > 0
    assert statuses["POST /v1/chat/completions"]["200"] > 0
    assert statuses["GET /api/knowledge-bases/{kb_id}/documents/"]["200"] > 0
    assert statuses["GET /api/chunks/{chunk_id}/preview"]["200"] > 0
    assert statuses["GET /api/assets/{asset_id}"]["200"] > 0
