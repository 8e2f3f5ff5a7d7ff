"""Who may do what, for every URL pattern in the project.

The resolver is walked and every pattern must have an entry here: a new URL without one fails
`test_every_url_pattern_has_an_entry`. Each entry says which role the pattern needs on the
restricted knowledge base the request is about; every persona then calls it and the outcome is
checked: allowed → served, a reader without the role → 403, anybody else → 404 (or the admin's
refusal) and, wherever it was refused, the response holds none of the knowledge base's text.

Each request runs in a savepoint that is rolled back, so every persona meets the same world.
"""

from __future__ import annotations

import io
import json
import re
import uuid
from dataclasses import dataclass, field
from urllib.parse import urlparse

import httpx
import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.auth.models import Group, User
from django.contrib.contenttypes.models import ContentType as DjangoContentType
from django.core.files.base import ContentFile
from django.core.files.uploadedfile import SimpleUploadedFile
from django.contrib.messages import get_messages
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import URLPattern, URLResolver, get_resolver
from PIL import Image
from rest_framework.authtoken.models import Token
from websockets.sync.client import connect

from chat.models import AnswerFeedback, Conversation, Message, QueryTrace
from evaluation.models import EvalCase, EvalRun, EvalSet
from knowledge.catalog import services as catalog_services
from knowledge.faqs import services as faq_services
from knowledge.access import Role
from knowledge.models import (
    AuditEntry,
    Chunk,
    ChunkItem,
    Document,
    DocumentAsset,
    DocumentStatus,
    Item,
    KnowledgeBase,
    TagSource,
    Visibility,
)
from tests.chat.conftest import csrf_pair, live_chat_server, post_stream, session_cookie_for, ws_url
from tests.conftest import make_document, make_kb, make_ready_version

pytestmark = pytest.mark.django_db

SECRET = "绝密项目XJ7"  # in every row of the restricted knowledge base: names, titles, text

PERSONAS = ["anonymous", "reader", "member", "editor", "publisher", "other_editor", "staff", "superuser"]
# Role of each persona on the restricted knowledge base.
ROLE_ON_SECRET = {
    "anonymous": Role.NONE, "reader": Role.NONE, "member": Role.READER, "editor": Role.EDITOR,
    "publisher": Role.PUBLISHER, "other_editor": Role.NONE, "staff": Role.NONE, "superuser": Role.PUBLISHER,
}
STAFF = {"editor", "publisher", "other_editor", "staff", "superuser"}
EDITS_SOMEWHERE = {"editor", "publisher", "other_editor", "superuser"}


# --- the world ---------------------------------------------------------------------------------


@dataclass
class World:
    users: dict[str, User | None]
    kb: KnowledgeBase
    ids: dict[str, object] = field(default_factory=dict)


def _png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (4, 4), "red").save(buffer, format="JPEG")
    return buffer.getvalue()


@pytest.fixture
def world(db, media_root) -> World:
    members, editors, publishers, others = (Group.objects.create(name=n) for n in ("members", "editors", "publishers", "others"))
    users: dict[str, User | None] = {"anonymous": None}
    for name, groups, staff in [
        ("reader", [], False), ("member", [members], False), ("editor", [editors], True),
        ("publisher", [publishers], True), ("other_editor", [others], True), ("staff", [], True),
    ]:
        users[name] = User.objects.create_user(name, password="pw-role-matrix", is_staff=staff)
        users[name].groups.set(groups)
    users["superuser"] = User.objects.create_user("root", password="pw-role-matrix", is_staff=True, is_superuser=True)

    kb = make_kb(slug="secret-kb", visibility=Visibility.RESTRICTED, groups=[members])
    kb = catalog_services.update_knowledge_base(
        kb=kb, actor=None, name=f"{SECRET} 知识库", editor_groups=[editors], publisher_groups=[publishers],
    )
    other = make_kb(slug="other-kb", visibility=Visibility.INTERNAL)
    catalog_services.update_knowledge_base(kb=other, actor=None, editor_groups=[others])

    published = make_document(kb, title=f"{SECRET} 手册")
    v1 = make_ready_version(kb, documents=[published])
    activation = catalog_services.activate_version(version=v1, actor=None, reason="首次发布")
    failed = make_document(kb, status=DocumentStatus.FAILED, title=f"{SECRET} 草稿文件")
    v2 = catalog_services.create_draft_version(kb=kb, actor=None, notes=f"{SECRET} 草稿说明")
    v2.documents.add(failed)
    chunk = Chunk.objects.create(
        document=published, knowledge_base=kb, ordinal=0, content=f"{SECRET} 的报销流程", token_count=8,
    )
    asset = DocumentAsset(document=published, sha256="ab" * 32, caption=f"{SECRET} 图", width=4, height=4)
    asset.file.save("a.jpg", ContentFile(_png()), save=False)
    asset.save()
    faq = faq_services.save_faq(kb=kb, question=f"{SECRET} 怎么申请？", answer=f"{SECRET} 找 IT。", actor=None)
    # Written directly: the audit id below must keep its length (the hidden-twin test needs a
    # free id of as many digits).
    item = Item.objects.create(knowledge_base=kb, name=f"{SECRET} 路由器")
    chunk_item = ChunkItem.objects.create(chunk=chunk, item=item, document=published, source=TagSource.MANUAL)
    conversation = Conversation.objects.create(knowledge_base=kb, user=users["member"], title=f"{SECRET} 会话")
    message = Message.objects.create(conversation=conversation, role="assistant", content=f"{SECRET} 回答", status="complete")
    trace = QueryTrace.objects.create(
        trace_id=uuid.uuid4(), knowledge_base=kb, conversation=conversation, assistant_message=message,
        user=users["member"], question=f"{SECRET} 的问题", status="completed",
    )
    feedback = AnswerFeedback.objects.create(message=message, knowledge_base=kb, user=users["member"],
                                             verdict="down", reason=f"{SECRET} 答非所问")
    eval_set = EvalSet.objects.create(name=f"{SECRET} 评测", knowledge_base=kb)
    EvalCase.objects.create(eval_set=eval_set, key="1", question=f"{SECRET} 评测问题")
    runs = [EvalRun.objects.create(eval_set=eval_set, label=f"{SECRET} run {n}", knowledge_base=kb) for n in (1, 2)]
    # The other knowledge base's evaluation: its editor's admin lists have rows (and filters) of their own.
    other_set = EvalSet.objects.create(name="其他评测", knowledge_base=other)
    EvalRun.objects.create(eval_set=other_set, label="其他 run", knowledge_base=other)
    token = Token.objects.create(user=users["superuser"])
    return World(users=users, kb=kb, ids={
        "v1": v1.number, "v2": v2.number, "published": published.pk, "failed": failed.pk, "chunk": chunk.pk,
        "asset": asset.pk, "faq": faq.pk, "item": item.pk, "chunk_item": chunk_item.pk,
        "conversation": conversation.pk, "trace": trace.pk, "message": message.pk, "feedback": feedback.pk,
        "activation": activation.pk, "eval_set": eval_set.pk, "runs": [r.pk for r in runs], "token": token.pk,
        "namespace": kb.cache_namespace.pk, "version_pk": v1.pk, "member_pk": users["member"].pk,
        "group": members.pk, "audit": AuditEntry.objects.filter(knowledge_base=kb).latest("pk").pk,
    })


# --- the table ---------------------------------------------------------------------------------

# What a pattern needs. "anyone": served to all; "reader" / "editor" / "publisher": that role on
# the restricted knowledge base; "creator": may create knowledge bases; "owner": the
# conversation's owner only (superusers included: a user's conversations are theirs alone).


@dataclass(frozen=True)
class Call:
    method: str
    need: str
    path: str  # with {placeholders} from World.ids and the knowledge base
    body: dict | None = None
    multipart: bool = False
    lists_secret: str = ""  # for "anyone" listings: the role whose holders see the secret rows
    live: bool = False  # a stream: checked against daphne in test_streams_follow_the_roles
    hidden_from_readers: bool = False  # a draft: to readers it does not exist (404, not 403)
    served_codes: tuple[str, ...] = ()  # error codes that still mean "served" (about the object)


def _question(kb: str = "secret-kb") -> dict:
    return {"knowledge_base_id": kb, "question": "报销流程是什么？"}


API: dict[str, list[Call]] = {
    "": [Call("GET", "anyone", "/", lists_secret="reader")],
    "favicon.ico": [Call("GET", "anyone", "/favicon.ico")],
    "i18n/setlang/": [Call("POST", "anyone", "/i18n/setlang/", {"language": "en"})],
    "api/knowledge-bases/": [
        Call("GET", "anyone", "/api/knowledge-bases/", lists_secret="reader"),
        Call("POST", "creator", "/api/knowledge-bases/", {"id": "new-kb", "name": "新知识库"}),
    ],
    "api/knowledge-bases/<str:kb_id>/": [
        Call("GET", "reader", "/api/knowledge-bases/{kb}/"),
        Call("PATCH", "editor", "/api/knowledge-bases/{kb}/", {"name": "改名"}),
        Call("PATCH", "publisher", "/api/knowledge-bases/{kb}/", {"visibility": "public"}),
        # Who may change it is asked before the body is read: to outsiders a hidden knowledge
        # base is missing whatever the body says (served: the group named does not exist).
        Call("PATCH", "publisher", "/api/knowledge-bases/{kb}/", {"editor_groups": ["没有这个组"]}),
    ],
    "api/knowledge-bases/<str:kb_id>/reanalyse/": [Call("POST", "editor", "/api/knowledge-bases/{kb}/reanalyse/")],
    "api/knowledge-bases/<str:kb_id>/versions/": [
        Call("GET", "reader", "/api/knowledge-bases/{kb}/versions/"),
        Call("POST", "editor", "/api/knowledge-bases/{kb}/versions/", {"label": "草稿"}),
    ],
    "api/knowledge-bases/<str:kb_id>/versions/<int:number>/": [
        Call("GET", "reader", "/api/knowledge-bases/{kb}/versions/{v1}/"),
        Call("GET", "editor", "/api/knowledge-bases/{kb}/versions/{v2}/", hidden_from_readers=True),
    ],
    "api/knowledge-bases/<str:kb_id>/versions/<int:number>/activate/": [
        Call("POST", "publisher", "/api/knowledge-bases/{kb}/versions/{v2}/activate/", {"reason": "上线"}),
    ],
    "api/knowledge-bases/<str:kb_id>/versions/<int:number>/rollback/": [
        Call("POST", "publisher", "/api/knowledge-bases/{kb}/versions/{v1}/rollback/", {"reason": "回滚"}),
    ],
    "api/knowledge-bases/<str:kb_id>/versions/<int:number>/mark-ready/": [
        Call("POST", "editor", "/api/knowledge-bases/{kb}/versions/{v2}/mark-ready/"),
    ],
    "api/knowledge-bases/<str:kb_id>/versions/<int:number>/retire/": [
        Call("POST", "publisher", "/api/knowledge-bases/{kb}/versions/{v2}/retire/"),
    ],
    "api/knowledge-bases/<str:kb_id>/activations/": [Call("GET", "editor", "/api/knowledge-bases/{kb}/activations/")],
    "api/knowledge-bases/<str:kb_id>/documents/": [
        Call("GET", "reader", "/api/knowledge-bases/{kb}/documents/"),
        Call("POST", "editor", "/api/knowledge-bases/{kb}/documents/", {"files": "upload"}, multipart=True),
    ],
    "api/knowledge-bases/<str:kb_id>/documents/<int:document_id>/": [
        Call("GET", "reader", "/api/knowledge-bases/{kb}/documents/{published}/"),
        Call("GET", "editor", "/api/knowledge-bases/{kb}/documents/{failed}/", hidden_from_readers=True),
        Call("DELETE", "editor", "/api/knowledge-bases/{kb}/documents/{failed}/"),
    ],
    "api/knowledge-bases/<str:kb_id>/documents/<int:document_id>/retry/": [
        Call("POST", "editor", "/api/knowledge-bases/{kb}/documents/{failed}/retry/"),
    ],
    "api/knowledge-bases/<str:kb_id>/faqs/": [
        Call("GET", "reader", "/api/knowledge-bases/{kb}/faqs/"),
        Call("POST", "editor", "/api/knowledge-bases/{kb}/faqs/", {"question": "新问题", "answer": "新答案"}),
    ],
    "api/knowledge-bases/<str:kb_id>/faqs/<int:faq_id>/": [
        Call("GET", "reader", "/api/knowledge-bases/{kb}/faqs/{faq}/"),
        Call("PUT", "editor", "/api/knowledge-bases/{kb}/faqs/{faq}/", {"question": "问", "answer": "答"}),
        Call("PATCH", "editor", "/api/knowledge-bases/{kb}/faqs/{faq}/", {"answer": "答"}),
        Call("DELETE", "editor", "/api/knowledge-bases/{kb}/faqs/{faq}/"),
    ],
    "api/admin/cache/invalidate": [Call("POST", "editor", "/api/admin/cache/invalidate", {"knowledge_base_id": "secret-kb"})],
    "api/retrieval/search": [Call("POST", "reader", "/api/retrieval/search", _question())],
    "api/retrieval/explain": [Call("POST", "reader", "/api/retrieval/explain", _question())],
    "api/assets/<int:asset_id>": [Call("GET", "reader", "/api/assets/{asset}")],
    # A Markdown chunk has no PDF region: served means the check passed and said so.
    "api/chunks/<int:chunk_id>/preview": [Call("GET", "reader", "/api/chunks/{chunk}/preview", served_codes=("preview_unavailable",))],
    # The answering transports run the turn on a worker thread: checked against daphne.
    "api/chat": [Call("POST", "reader", "/api/chat", _question(), live=True)],
    "api/chat/stream": [Call("POST", "reader", "/api/chat/stream", _question(), live=True)],
    "api/chat/conversations": [Call("GET", "anyone", "/api/chat/conversations", lists_secret="owner")],
    # The OpenAI-compatible transports (integrations/openai): knowledge bases as models.
    "v1/models": [Call("GET", "anyone", "/v1/models")],
    "v1/models/<str:model_id>": [Call("GET", "reader", "/v1/models/{kb}")],
    "v1/chat/completions": [Call("POST", "reader", "/v1/chat/completions",
                                 {"model": "secret-kb", "messages": [{"role": "user", "content": "报销流程是什么？"}]},
                                 live=True)],
    "api/chat/conversations/<uuid:conversation_id>": [Call("GET", "owner", "/api/chat/conversations/{conversation}")],
    "api/chat/messages/<str:message_id>/feedback": [
        Call("GET", "owner", "/api/chat/messages/{message}/feedback"),
        Call("PUT", "owner", "/api/chat/messages/{message}/feedback", {"verdict": "up"}),
        Call("DELETE", "owner", "/api/chat/messages/{message}/feedback"),
    ],
    "api/schema/": [Call("GET", "anyone", "/api/schema/")],
    "api/docs/": [Call("GET", "anyone", "/api/docs/")],
    "events/kb/<int:kb_id>/": [Call("GET", "editor", "/events/kb/{kb_pk}/", live=True)],
}

# Admin pages. Each registered model must be listed with the object its pages open and who may
# add and delete; a model admin registered later without an entry fails the completeness test.
SCOPED = "scoped"  # rows of a knowledge base: its editors
SUPERUSER = "superuser"  # site administration: superusers (or explicit Django model permissions)


@dataclass(frozen=True)
class AdminModel:
    scope: str
    obj: str  # key in World.ids
    add: str | None = "editor"  # None: nobody adds here
    delete: str | None = "editor"  # None: nobody deletes here
    change_post: bool = True


ADMIN_MODELS = {
    "knowledge/knowledgebase": AdminModel(SCOPED, "kb_pk", add="creator", delete="publisher"),
    "knowledge/knowledgebaseversion": AdminModel(SCOPED, "version_pk", add=None, delete=None),
    "knowledge/versionactivation": AdminModel(SCOPED, "activation", add=None, delete=None),
    "knowledge/auditentry": AdminModel(SCOPED, "audit", add=None, delete=None),
    "knowledge/document": AdminModel(SCOPED, "published", add=None, delete=None),
    "knowledge/chunk": AdminModel(SCOPED, "chunk", add=None, delete=None),
    "knowledge/documentasset": AdminModel(SCOPED, "asset", add=None, delete=None),
    "knowledge/faq": AdminModel(SCOPED, "faq"),
    "knowledge/item": AdminModel(SCOPED, "item"),
    "knowledge/chunkitem": AdminModel(SCOPED, "chunk_item", change_post=False),
    "knowledge/cachenamespace": AdminModel(SCOPED, "namespace", add=None, delete=None),
    "chat/querytrace": AdminModel(SCOPED, "trace", add=None, delete=None),
    "chat/conversation": AdminModel(SCOPED, "conversation", add=None),
    "chat/answerfeedback": AdminModel(SCOPED, "feedback", add=None, change_post=False),
    "evaluation/evalset": AdminModel(SCOPED, "eval_set"),
    "evaluation/evalrun": AdminModel(SCOPED, "run1", add=None),
    "auth/user": AdminModel(SUPERUSER, "member_pk"),
    "auth/group": AdminModel(SUPERUSER, "group"),
    "authtoken/tokenproxy": AdminModel(SUPERUSER, "token_key"),
    "django_tasks_database/dbtaskresult": AdminModel(SUPERUSER, "none", add=None),
}

# Admin pages that are not a model's standard five, by pattern: (path, who is served).
ADMIN_PAGES = {
    "admin/": ("/admin/", "staff"),
    "admin/login/": ("/admin/login/", "login"),  # signed-in staff are sent on to the index
    "admin/logout/": ("/admin/logout/", "logout"),
    "admin/password_change/": ("/admin/password_change/", "staff"),
    "admin/password_change/done/": ("/admin/password_change/done/", "staff"),
    "admin/autocomplete/": ("/admin/autocomplete/", "nobody"),  # no autocomplete fields: refused to all
    "admin/jsi18n/": ("/admin/jsi18n/", "staff"),
    "admin/r/<path:content_type_id>/<path:object_id>/": ("/admin/r/{kb_ct}/{kb_pk}/", "nobody"),
    "admin/(?P<url>.*)$": ("/admin/no-such-page/", "nobody"),
    "admin/<app_label>/": ("/admin/knowledge/", "edits"),
    "admin/auth/user/<id>/password/": ("/admin/auth/user/{member_pk}/password/", "superuser"),
    "admin/knowledge/knowledgebase/<int:kb_pk>/hit-test/": ("/admin/knowledge/knowledgebase/{kb_pk}/hit-test/", "editor"),
    "admin/knowledge/document/upload/": ("/admin/knowledge/document/upload/", "edits"),
    "admin/knowledge/document/queue/": ("/admin/knowledge/document/queue/", "edits"),
    "admin/knowledge/item/import/": ("/admin/knowledge/item/import/", "edits"),
    "admin/knowledge/document/<int:document_id>/retry/": ("/admin/knowledge/document/{failed}/retry/", "editor-post"),
    "admin/knowledge/documentasset/<int:asset_id>/image/": ("/admin/knowledge/documentasset/{asset}/image/", "editor"),
    "admin/chat/answerfeedback/<int:pk>/case/": ("/admin/chat/answerfeedback/{feedback}/case/", "editor"),
    "admin/evaluation/evalset/import/": ("/admin/evaluation/evalset/import/", "edits"),
    "admin/evaluation/evalrun/compare/<int:a>/<int:b>/": ("/admin/evaluation/evalrun/compare/{run1}/{run2}/", "editor"),
    "admin/evaluation/evalrun/charts/": ("/admin/evaluation/evalrun/charts/?ids={run1},{run2}", "editor"),
}


def _walk(patterns, prefix=""):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _walk(pattern.url_patterns, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern):
            route = prefix + str(pattern.pattern)
            # The admin's app index is one regex over the registered apps, in registration order.
            yield "admin/<app_label>/" if "(?P<app_label>" in route else route


def _admin_model_routes() -> dict[str, str]:
    """Pattern → model key ("app/model") for every registered model's standard pages."""
    routes = {}
    for model in admin.site._registry:
        key = f"{model._meta.app_label}/{model._meta.model_name}"
        for suffix in ("", "add/", "<path:object_id>/history/", "<path:object_id>/delete/",
                       "<path:object_id>/change/", "<path:object_id>/"):
            routes[f"admin/{key}/{suffix}"] = key
    return routes


def test_every_url_pattern_has_an_entry():
    # given
    patterns = set(_walk(get_resolver().url_patterns))
    known = set(API) | set(ADMIN_PAGES) | set(_admin_model_routes())
    # when
    missing = sorted(patterns - known)
    unregistered = sorted({key for key in _admin_model_routes().values()} - set(ADMIN_MODELS))
    # then
    assert missing == [], f"URL patterns without an entry in the role matrix: {missing}"
    assert unregistered == [], f"admin models without an entry in ADMIN_MODELS: {unregistered}"
    assert sorted(set(API) - patterns) == [], "entries for URL patterns that no longer exist"


# --- running it --------------------------------------------------------------------------------


def _client(world: World, persona: str) -> Client:
    client = Client()
    if world.users[persona] is not None:
        client.force_login(world.users[persona])
    return client


def _placeholders(world: World) -> dict:
    ids = dict(world.ids)
    ids.update(kb=world.kb.slug, kb_pk=world.kb.pk, run1=ids["runs"][0], run2=ids["runs"][1],
               kb_ct=DjangoContentType.objects.get_for_model(KnowledgeBase).pk,
               token_key=world.users["superuser"].pk, none="0")  # a token's admin pages are its user's
    return ids


def _send(client: Client, method: str, path: str, body: dict | None, multipart: bool):
    """One request inside a savepoint that is rolled back afterwards."""
    with transaction.atomic():
        if multipart:
            response = client.post(path, {"files": [SimpleUploadedFile("新文件.md", "# 新\n\n内容".encode())]})
        elif method == "GET":
            response = client.get(path)
        elif method == "POST" and path.startswith("/i18n/") or path.startswith("/admin/"):
            response = client.post(path, body or {})
        else:
            response = client.generic(method, path, data=json.dumps(body or {}), content_type="application/json")
        # Reading a streamed body through the client closes it the way the client expects.
        content = b"".join(response.streaming_content) if response.streaming else response.content
        transaction.set_rollback(True)
    return response, content.decode("utf-8", "replace")


def _allowed(need: str, persona: str) -> bool:
    role = ROLE_ON_SECRET[persona]
    return {
        "anyone": True,
        "reader": role >= Role.READER,
        "editor": role >= Role.EDITOR,
        "publisher": role >= Role.PUBLISHER,
        "creator": persona == "superuser",
        "owner": persona == "member",
    }[need]


def test_api_and_pages_follow_the_roles(world):
    # given
    values = _placeholders(world)
    failures = []
    # when
    for route, calls in API.items():
        for call in calls:
            if call.live:
                continue
            path = call.path.format(**values)
            for persona in PERSONAS:
                response, body = _send(_client(world, persona), call.method, path, call.body, call.multipart)
                status = response.status_code
                where = f"{call.method} {path} as {persona}: {status} {body[:160]!r}"
                code = response.json().get("code") if response.get("Content-Type", "").startswith("application/json") and status >= 400 else None
                if _allowed(call.need, persona):
                    if (status in (401, 403, 404) and code not in call.served_codes) or status >= 500:
                        failures.append(f"refused but allowed — {where}")
                    if call.lists_secret and (SECRET in body) != _allowed(call.lists_secret, persona):
                        failures.append(f"listing shows the wrong rows — {where}")
                    continue
                if SECRET in body:
                    failures.append(f"refused response leaks the knowledge base — {where}")
                reads = ROLE_ON_SECRET[persona] >= Role.READER and call.need not in ("owner", "creator") \
                    and not call.hidden_from_readers
                expected = 403 if reads or call.need == "creator" else 404
                if status != expected:
                    failures.append(f"expected {expected} — {where}")
    # then
    assert failures == [], "\n".join(failures)


def _admin_expectations(world: World, values: dict):
    """(path, method, who is served) for every admin page."""
    for route, (path, who) in ADMIN_PAGES.items():
        yield route, path.format(**values), ("POST" if who in ("logout", "editor-post") else "GET"), who
    for key, model in ADMIN_MODELS.items():
        obj = values[model.obj] if model.obj != "none" else 0
        base = f"/admin/{key}/"
        list_who = "edits" if model.scope == SCOPED else "superuser"
        object_who = "editor" if model.scope == SCOPED else "superuser"
        yield key, base, "GET", list_who
        add_who = {None: "nobody", "editor": list_who, "creator": "superuser"}[model.add] if model.scope == SCOPED \
            else ("superuser" if model.add else "nobody")
        yield key, f"{base}add/", "GET", add_who
        if model.obj == "none":
            continue
        yield key, f"{base}{obj}/change/", "GET", object_who
        yield key, f"{base}{obj}/history/", "GET", object_who
        delete_who = {None: "nobody", "editor": object_who, "publisher": "publisher"}[model.delete]
        yield key, f"{base}{obj}/delete/", "GET", delete_who


def _admin_served(who: str, persona: str) -> bool:
    role = ROLE_ON_SECRET[persona]
    return {
        "anyone": True,
        "logout": True,
        "login": True,
        "staff": persona in STAFF,
        "edits": persona in EDITS_SOMEWHERE,
        "editor": persona in STAFF and role >= Role.EDITOR,
        "editor-post": persona in STAFF and role >= Role.EDITOR,
        "publisher": persona in STAFF and role >= Role.PUBLISHER,
        "superuser": persona == "superuser",
        "nobody": False,
    }[who]


def test_admin_pages_follow_the_roles(world):
    # given
    values = _placeholders(world)
    failures = []
    # when
    for route, path, method, who in _admin_expectations(world, values):
        for persona in PERSONAS:
            response, body = _send(_client(world, persona), method, path, {}, False)
            status, location = response.status_code, response.get("Location", "")
            where = f"{method} {path} as {persona}: {status} {location} {body[:120]!r}"
            if who == "editor-post":  # the retry button: served means re-queued, then its page
                served = status == 302 and f"/{values['failed']}/change/" in location
                if served != _admin_served(who, persona):
                    failures.append(f"retry {'refused' if not served else 'served'} wrongly — {where}")
                continue
            if _admin_served(who, persona):
                if status != 200 and not (who in ("logout", "login") and status == 302):
                    failures.append(f"refused but allowed — {where}")
                continue
            if status not in (302, 403, 404):
                failures.append(f"served but refused — {where}")
            if status == 302 and urlparse(location).path == urlparse(path).path:
                failures.append(f"redirects to itself — {where}")
            if SECRET in body:
                failures.append(f"refused page leaks the knowledge base — {where}")
    # then
    assert failures == [], "\n".join(failures)


@pytest.mark.parametrize("persona", PERSONAS)
def test_admin_lists_show_only_the_rows_the_persona_edits(world, persona):
    # given
    client = _client(world, persona)
    # when
    pages = {key: client.get(f"/admin/{key}/") for key, model in ADMIN_MODELS.items() if model.scope == SCOPED}
    # then
    for key, response in pages.items():
        shows = response.status_code == 200 and SECRET in response.content.decode()
        assert shows == (persona in STAFF and ROLE_ON_SECRET[persona] >= Role.EDITOR), f"{key} as {persona}"



def test_conversations_of_a_knowledge_base_no_longer_readable_are_gone_for_their_owner(world):
    # given: the member's conversation on the restricted knowledge base, and the member then
    # leaving the group that may read it
    own_elsewhere = Conversation.objects.create(
        knowledge_base=KnowledgeBase.objects.get(slug="other-kb"), user=world.users["member"], title="别处的会话",
    )
    world.users["member"].groups.clear()
    client = _client(world, "member")
    # when
    listing = client.get("/api/chat/conversations")
    filtered = client.get("/api/chat/conversations", {"knowledge_base_id": world.kb.slug})
    detail = client.get(f"/api/chat/conversations/{world.ids['conversation']}")
    # then: what remains readable is listed; the rest is not there, as for a missing one
    assert [c["id"] for c in listing.json()["results"]] == [str(own_elsewhere.pk)]
    assert filtered.json()["results"] == [] and SECRET not in listing.content.decode() + filtered.content.decode()
    assert detail.status_code == 404 and detail.json()["code"] == "conversation_not_found"

# --- streams, against daphne ------------------------------------------------------------------


def _live_identity(world: World, persona: str) -> tuple[dict, dict]:
    """(cookies, headers) of a browser signed in as `persona`, with its CSRF token."""
    cookie, header = csrf_pair()
    user = world.users[persona]
    return ({**cookie, **(session_cookie_for(user) if user else {})}, header)


@pytest.mark.django_db(transaction=True)
def test_streams_follow_the_roles(world):
    # given
    failures = []
    values = _placeholders(world)
    with live_chat_server() as base_url:
        for persona in PERSONAS:
            cookies, headers = _live_identity(world, persona)
            reads = ROLE_ON_SECRET[persona] >= Role.READER
            edits = ROLE_ON_SECRET[persona] >= Role.EDITOR
            # when: the SSE answer stream
            response, parts = post_stream(base_url, _question(), cookies=cookies, headers=headers)
            served = response.headers.get("content-type", "").startswith("text/event-stream")
            if served != reads or (not reads and response.status_code != 404):
                failures.append(f"chat stream as {persona}: {response.status_code} served={served}")
            # when: the JSON answer
            with httpx.Client(base_url=base_url, cookies=cookies, timeout=60) as client:
                answer = client.post("/api/chat", json=_question(), headers=headers)
            if (answer.status_code == 200) != reads or (not reads and answer.status_code != 404) \
                    or (not reads and SECRET in answer.text):
                failures.append(f"chat JSON as {persona}: {answer.status_code} {answer.text[:120]}")
            # when: the ingestion progress stream
            with httpx.Client(base_url=base_url, cookies=cookies, timeout=30) as client:
                with client.stream("GET", "/events/kb/{kb_pk}/".format(**values)) as events:
                    watching = events.headers.get("content-type", "").startswith("text/event-stream")
                    status = events.status_code
                    body = b"" if watching else events.read()
            expected_status = 200 if edits else (403 if reads else 404)
            if watching != edits or status != expected_status or SECRET.encode() in body:
                failures.append(f"events as {persona}: {status} watching={watching}")
            # when: the WebSocket
            header = {"Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items())}
            with connect(ws_url(base_url), origin=base_url, additional_headers=header, proxy=None, open_timeout=30) as socket:
                socket.send(json.dumps({"type": "question", **_question()}))
                first = json.loads(socket.recv(timeout=60))
                while first["type"] == "status":
                    first = json.loads(socket.recv(timeout=60))
            if reads != (first["type"] == "start") or (not reads and first.get("code") != "knowledge_base_not_found"):
                failures.append(f"websocket as {persona}: {first}")
    # then
    assert failures == [], "\n".join(failures)


def test_websocket_routes_are_all_in_the_matrix():
    # given
    from ragsite.routing import websocket_urlpatterns

    # then: the one WebSocket route is walked by test_streams_follow_the_roles
    assert [str(p.pattern) for p in websocket_urlpatterns] == ["ws/chat/"]


# --- hidden answers like missing ----------------------------------------------------------------

OUTSIDERS = [persona for persona in PERSONAS if ROLE_ON_SECRET[persona] == Role.NONE]
ABSENT_SLUG = "absent-kb"  # as long as "secret-kb": equal answers have equal lengths
CLOCK_HEADERS = {"date", "expires"}  # the time of the answer, not what it says


def _absent_like(model, pk):
    """An id no row of `model` has, written with as many characters as `pk`."""
    if isinstance(pk, uuid.UUID):
        return uuid.uuid4()
    taken = set(model.objects.values_list("pk", flat=True))
    digits = len(str(pk))
    return next(n for n in range(10 ** (digits - 1), 10 ** digits) if n not in taken)


@dataclass(frozen=True)
class Twin:
    """One request about a hidden object and the same request about a missing one."""

    persona: str
    method: str
    hidden_path: str
    body: dict | None
    multipart: bool
    hidden: str  # the hidden object's identifier as it appears in the request
    missing: str  # a missing object's, of the same length

    def missing_path(self) -> str:
        return self.hidden_path.replace(self.hidden, self.missing)

    def missing_body(self) -> dict | None:
        return None if self.body is None else json.loads(json.dumps(self.body).replace(self.hidden, self.missing))


def _hidden_twins(world: World) -> list[Twin]:
    values = _placeholders(world)
    absent = {
        "kb": ABSENT_SLUG, "kb_pk": _absent_like(KnowledgeBase, world.kb.pk),
        "asset": _absent_like(DocumentAsset, values["asset"]), "chunk": _absent_like(Chunk, values["chunk"]),
        "conversation": uuid.uuid4(),
    }
    twins = []
    for calls in API.values():
        for call in calls:
            if call.need in ("anyone", "creator") or (call.live and "/events/" not in call.path):
                continue
            # The object the request is about: the knowledge base (in the path or the body), else
            # the asset, chunk or conversation.
            name = next((n for n in ("kb", "kb_pk", "asset", "chunk", "conversation") if "{" + n + "}" in call.path), "kb")
            personas = [p for p in PERSONAS if p != "member"] if call.need == "owner" else OUTSIDERS
            for persona in personas:
                twins.append(Twin(persona, call.method, call.path.format(**values), call.body, call.multipart,
                                  str(values[name]), str(absent[name])))
    # The admin's pages about one row of the knowledge base, for its editors.
    pages = []
    for path, who in ADMIN_PAGES.values():
        named = re.findall(r"\{(\w+)\}", path)
        if who in ("editor", "editor-post") and len(named) == 1:
            pages.append(("POST" if who == "editor-post" else "GET", path, named[0]))
    for key, model in ADMIN_MODELS.items():
        if model.scope == SCOPED:
            pages += [("GET", f"/admin/{key}/{{{model.obj}}}/{suffix}", model.obj) for suffix in ("change/", "history/", "delete/")]
            absent.setdefault(model.obj, _absent_like(apps.get_model(*key.split("/")), values[model.obj]))
    absent.setdefault("failed", _absent_like(Document, values["failed"]))
    for method, path, name in pages:
        twins += [Twin(p, method, path.format(**values), None, False, str(values[name]), str(absent[name])) for p in OUTSIDERS]
    return twins


def _as_missing(text: str, hidden: str, missing: str) -> str:
    """`text` with the hidden object's identifier, where it stands alone, written as the missing one's."""
    return re.sub(rf"(?<![0-9A-Za-z-]){re.escape(hidden)}(?![0-9A-Za-z-])", missing, text)


def _comparable(response, content: str, *, hidden: str, missing: str) -> dict:
    """What a client can observe of an answer. Identifiers are as long as each other, so the
    lengths are compared as they are."""
    headers = {name.lower(): _as_missing(value, hidden, missing) if name.lower() == "location" else value
               for name, value in response.items() if name.lower() not in CLOCK_HEADERS}
    # The admin says "not found" in a flash message, kept in a signed cookie: compare its text.
    notes = [_as_missing(str(m), hidden, missing) for m in get_messages(response.wsgi_request)]
    return {"status": response.status_code, "headers": headers, "cookies": sorted(response.cookies),
            "messages": notes, "body": _as_missing(content, hidden, missing)}


def test_hidden_objects_answer_exactly_like_missing_ones(world):
    # given: requests about the restricted knowledge base (and its rows) by people who may not
    # read it, each beside the same request about an object that does not exist
    failures = []
    for twin in _hidden_twins(world):
        # when: each from a fresh browser (the admin's flash messages stay in the client's cookies)
        first, second = _client(world, twin.persona), _client(world, twin.persona)
        with CaptureQueriesContext(connection) as hidden_queries:
            hidden, hidden_body = _send(first, twin.method, twin.hidden_path, twin.body, twin.multipart)
        with CaptureQueriesContext(connection) as missing_queries:
            missing, missing_body = _send(second, twin.method, twin.missing_path(), twin.missing_body(), twin.multipart)
        # then: the same status, headers and body, and the same amount of database work
        seen = _comparable(hidden, hidden_body, hidden=twin.hidden, missing=twin.missing)
        expected = _comparable(missing, missing_body, hidden=twin.hidden, missing=twin.missing)
        where = f"{twin.method} {twin.hidden_path} as {twin.persona}"
        if seen != expected:
            failures.append(f"{where}: " + repr({k: (seen[k], expected[k]) for k in seen if seen[k] != expected[k]}))
        elif len(hidden_queries) != len(missing_queries):
            failures.append(f"{where}: {len(hidden_queries)} queries for hidden, {len(missing_queries)} for missing")
    assert failures == [], "\n".join(failures)


def _observed(response: httpx.Response, *, hidden: str, missing: str) -> dict:
    headers = []
    for name, value in response.headers.multi_items():
        if name == "set-cookie":  # a new anonymous session each time: its name and flags, not its key or clock
            value = re.sub(r"; expires=[^;]*", "", re.sub(r"^([^=]+)=[^;]*", r"\1=…", value))
        if name not in CLOCK_HEADERS:
            headers.append((name, value))
    return {"status": response.status_code, "headers": sorted(headers), "body": _as_missing(response.text, hidden, missing)}


def _first_turn_event(base_url: str, cookies: dict, question: dict) -> str:
    """The WebSocket's first event after `question` that is not a status."""
    header = {"Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items())}
    with connect(ws_url(base_url), origin=base_url, additional_headers=header, proxy=None, open_timeout=30) as socket:
        socket.send(json.dumps({"type": "question", **question}))
        event = socket.recv(timeout=60)
        while json.loads(event)["type"] == "status":
            event = socket.recv(timeout=60)
    return event


@pytest.mark.django_db(transaction=True)
def test_hidden_knowledge_bases_answer_like_missing_ones_on_the_live_transports(world):
    # given: daphne, and the people who may not read the restricted knowledge base
    failures = []
    hidden_pk, missing_pk = str(world.kb.pk), str(_absent_like(KnowledgeBase, world.kb.pk))
    with live_chat_server() as base_url:
        for persona in OUTSIDERS:
            cookies, headers = _live_identity(world, persona)
            answers = {}
            for which, slug, pk in (("hidden", world.kb.slug, hidden_pk), ("missing", ABSENT_SLUG, missing_pk)):
                # when: the JSON answer, the SSE answer, the ingestion stream and the WebSocket
                with httpx.Client(base_url=base_url, cookies=cookies, timeout=60) as client:
                    answers[which] = {
                        "chat": (client.post("/api/chat", json=_question(slug), headers=headers), slug),
                        "chat stream": (client.post("/api/chat/stream", json=_question(slug), headers=headers), slug),
                        "events": (client.get(f"/events/kb/{pk}/"), pk),
                    }
                answers[which]["websocket"] = _first_turn_event(base_url, cookies, _question(slug))
            # then: each answer about the hidden one reads as the answer about the missing one
            for transport in ("chat", "chat stream", "events"):
                (hidden, hidden_id), (missing, missing_id) = answers["hidden"][transport], answers["missing"][transport]
                seen, expected = (_observed(r, hidden=hidden_id, missing=missing_id) for r in (hidden, missing))
                if seen != expected:
                    failures.append(f"{transport} as {persona}: {seen} != {expected}")
            if _as_missing(answers["hidden"]["websocket"], world.kb.slug, ABSENT_SLUG) != answers["missing"]["websocket"]:
                failures.append(f"websocket as {persona}: {answers['hidden']['websocket']} != {answers['missing']['websocket']}")
    assert failures == [], "\n".join(failures)
