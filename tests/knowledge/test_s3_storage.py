"""Files and assets through django-storages' S3 backend against a real HTTP S3 endpoint (moto server)."""

from __future__ import annotations

import socket

import boto3
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from knowledge.catalog import services as catalog_services
from knowledge.documents import services as document_services
from demo.build import build_demo_corpus
from knowledge.models import Chunk, DocumentAsset, DocumentStatus
from tests.conftest import make_kb

pytestmark = pytest.mark.django_db(transaction=True)

BUCKET = "ragsite-test"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def s3_endpoint():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=_free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3_storage(settings, s3_endpoint):
    credentials = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing", "region_name": "us-east-1"}
    client = boto3.client("s3", endpoint_url=s3_endpoint, **credentials)
    client.create_bucket(Bucket=BUCKET)
    settings.AWS_STORAGE_BUCKET_NAME = BUCKET
    settings.AWS_S3_ENDPOINT_URL = s3_endpoint
    settings.AWS_S3_REGION_NAME = "us-east-1"
    settings.AWS_ACCESS_KEY_ID = "testing"
    settings.AWS_SECRET_ACCESS_KEY = "testing"
    settings.AWS_S3_FILE_OVERWRITE = False
    settings.AWS_DEFAULT_ACL = None
    settings.STORAGES = {**settings.STORAGES, "default": {"BACKEND": "storages.backends.s3.S3Storage"}}
    yield client
    listing = client.list_objects_v2(Bucket=BUCKET).get("Contents", [])
    for item in listing:
        client.delete_object(Bucket=BUCKET, Key=item["Key"])
    client.delete_bucket(Bucket=BUCKET)


def keys(client) -> list[str]:
    return sorted(item["Key"] for item in client.list_objects_v2(Bucket=BUCKET).get("Contents", []))


def test_pdf_with_image_ingests_from_s3_and_stores_assets_there(s3_storage, milvus, run_tasks, tmp_path, staff_user):
    # given
    manual = next(p for p in build_demo_corpus(tmp_path) if p.name == "product_manual.pdf")
    kb = make_kb()
    # when
    document = document_services.upload_documents(
        kb=kb, actor=staff_user, files=[SimpleUploadedFile(manual.name, manual.read_bytes())]
    )[0].document
    # then
    document.refresh_from_db()
    assert document.status == DocumentStatus.READY, document.error_message
    stored = keys(s3_storage)
    assert document.file.name in stored
    asset = DocumentAsset.objects.get(document=document)
    assert asset.file.name in stored
    body = s3_storage.get_object(Bucket=BUCKET, Key=asset.file.name)["Body"].read()
    assert body[:3] == b"\xff\xd8\xff"  # a JPEG
    assert Chunk.objects.get(document=document, content_type="image").asset_ids == [asset.pk]


def test_refused_upload_leaves_the_bucket_empty(s3_storage, staff_user):
    kb = make_kb()
    from ragsite.errors import ValidationFailed

    with pytest.raises(ValidationFailed):
        document_services.upload_documents(kb=kb, actor=staff_user, files=[SimpleUploadedFile("fake.pdf", b"no pdf here")])
    assert keys(s3_storage) == []


def test_purge_deletes_objects_from_the_bucket(s3_storage, milvus, run_tasks, staff_user):
    # given: a draft-only document (the draft stays BUILDING because its other document failed)
    kb = make_kb()
    outcomes = document_services.upload_documents(
        kb=kb, actor=staff_user,
        files=[SimpleUploadedFile("a.md", "# 标题\n\n正文内容。".encode()), SimpleUploadedFile("b.md", b"\n\n")],
    )
    document = outcomes[0].document
    assert document.file.name in keys(s3_storage)
    # when
    catalog_services.delete_document(document=document, actor=staff_user)
    # then
    assert document.file.name not in keys(s3_storage)
