"""The knowledge base's web search switch in the admin: a publisher's setting (questions leave
for a service outside), off by default, saved through the service with an audit entry."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse

from knowledge.catalog import services as catalog_services
from knowledge.models import AuditAction, AuditEntry, Visibility
from tests.conftest import make_kb

pytestmark = pytest.mark.django_db

FIELDS = {"name": "我的知识库", "description": "", "support_contact": "IT 服务台 8000", "custom_terms": "",
          "visibility": "internal", "release_max_regression_points": "", "link_allowed_hosts": ""}


@pytest.fixture
def roles(db):
    editors, publishers = Group.objects.create(name="editors"), Group.objects.create(name="publishers")
    kb = make_kb(slug="mine", visibility=Visibility.INTERNAL)
    catalog_services.update_knowledge_base(kb=kb, actor=None, name="我的知识库", editor_groups=[editors],
                                           publisher_groups=[publishers])
    users = {}
    for name, group in (("editor", editors), ("publisher", publishers)):
        users[name] = User.objects.create_user(name, password="pw-role-123", is_staff=True)
        users[name].groups.add(group)
    return kb, users


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_publisher_switches_web_search_on_in_its_own_fieldset(roles):
    # given
    kb, users = roles
    url = reverse("admin:knowledge_knowledgebase_change", args=[kb.pk])
    client = signed_in(users["publisher"])
    # when
    form = client.get(url)
    saved = client.post(url, {**FIELDS, "web_search_enabled": "on"})
    # then
    assert kb.web_search_enabled is False  # off by default
    page = form.content.decode()
    assert 'name="web_search_enabled"' in page
    fieldset = [title for title, _options in form.context["adminform"].fieldsets if "web_search_enabled" in _options["fields"]]
    assert [str(title) for title in fieldset] == ["网络搜索"]
    assert saved.status_code == 302
    kb.refresh_from_db()
    assert kb.web_search_enabled is True
    assert AuditEntry.objects.filter(knowledge_base=kb, action=AuditAction.KB_UPDATED).order_by("pk").last().target == "启用网络搜索"


def test_an_editor_sees_the_switch_but_cannot_turn_it(roles):
    # given
    kb, users = roles
    url = reverse("admin:knowledge_knowledgebase_change", args=[kb.pk])
    client = signed_in(users["editor"])
    # when
    form = client.get(url).content.decode()
    client.post(url, {key: value for key, value in FIELDS.items() if key not in ("visibility", "link_allowed_hosts")}
                | {"web_search_enabled": "on"})
    # then
    kb.refresh_from_db()
    assert 'name="web_search_enabled"' not in form and "启用网络搜索" in form
    assert kb.web_search_enabled is False
