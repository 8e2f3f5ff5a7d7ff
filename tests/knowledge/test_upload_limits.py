"""Upload caps enforced while the request is read, before the upload service sees it."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from knowledge.models import Document
from tests.knowledge.test_api_documents import stored_files, upload

pytestmark = pytest.mark.django_db


def test_the_multipart_parser_stops_at_the_first_file_over_the_count(staff_api, kb, media_root, settings):
    # given: the parser's count is the per-upload count (settings/base.py); lowered here so the
    # parser refuses before the service's own check
    settings.DATA_UPLOAD_MAX_NUMBER_FILES = 2
    files = [SimpleUploadedFile(f"{i}.md", f"# {i}".encode()) for i in range(3)]
    # when
    response = upload(staff_api, kb, *files)
    # then: the API's error shape, not Django's HTML 400, and nothing kept
    assert response.status_code == 400
    assert response.json()["code"] == "too_many_files"
    assert "2" in response.json()["detail"]
    assert not Document.objects.filter(knowledge_base=kb).exists()
    assert stored_files(media_root) == []


def test_the_parser_count_follows_the_upload_count():
    from django.conf import settings

    assert settings.DATA_UPLOAD_MAX_NUMBER_FILES == settings.RAG_MAX_FILES_PER_UPLOAD
