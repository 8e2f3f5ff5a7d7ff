"""The disk filling up during an upload: a clean coded error (507 `storage_full`), nothing
half-stored (no document row without its file, no orphan or truncated file), the draft and the
active version untouched, and the next upload stored whole.

Two disks: the real FileSystemStorage on a disk that fills after some bytes (always), and a
1 MiB tmpfs (when the tests run as root and may mount).
"""

from __future__ import annotations

import errno
import hashlib
import os
import subprocess
from pathlib import Path

import pytest
from django.core.files import File
from django.core.files.storage import FileSystemStorage
from django.core.files.uploadedfile import SimpleUploadedFile

from knowledge.models import Document, KnowledgeBaseVersion
from knowledge.documents.services import _storage_key

pytestmark = pytest.mark.django_db


class _FillingDisk(File):
    """The upload's bytes, as a disk with `room` bytes left receives them."""

    def __init__(self, content, room: int) -> None:
        super().__init__(content.file, content.name)
        self._content = content
        self._room = room

    def chunks(self, chunk_size=None):
        for chunk in self._content.chunks(chunk_size):
            if len(chunk) > self._room:
                yield chunk[: self._room]
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            self._room -= len(chunk)
            yield chunk


class FillingDiskStorage(FileSystemStorage):
    free_bytes = 0  # shared by every instance: one disk

    def _save(self, name, content):
        room, FillingDiskStorage.free_bytes = FillingDiskStorage.free_bytes, max(0, FillingDiskStorage.free_bytes - content.size)
        return super()._save(name, _FillingDisk(content, room))


@pytest.fixture
def filling_disk(settings, media_root):
    settings.STORAGES = {**settings.STORAGES, "default": {"BACKEND": f"{__name__}.FillingDiskStorage"}}
    FillingDiskStorage.free_bytes = 10**9
    return FillingDiskStorage


@pytest.fixture
def tmpfs_media(settings, tmp_path):
    mount_point = tmp_path / "small-disk"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)],
                             capture_output=True, check=False)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    settings.MEDIA_ROOT = mount_point
    yield mount_point
    subprocess.run(["umount", str(mount_point)], check=False)


def upload(client, kb, *files):
    return client.post(f"/api/knowledge-bases/{kb.slug}/documents/", {"files": list(files)}, format="multipart")


def text_file(name: str, size: int) -> SimpleUploadedFile:
    line = f"{name} 的内容：员工出差住宿标准按城市级别执行。\n".encode()
    whole = line * (size // len(line))
    return SimpleUploadedFile(name, whole + b"." * (size - len(whole)))  # exactly `size`, valid UTF-8


def files_under(root: Path) -> list[Path]:
    return [p for p in Path(root).rglob("*") if p.is_file()]


def versions_of(kb):
    return [(v.pk, v.status, sorted(v.documents.values_list("pk", flat=True)))
            for v in KnowledgeBaseVersion.objects.filter(knowledge_base=kb).order_by("pk")]


def test_disk_full_mid_upload_is_a_507_and_nothing_is_half_stored(
    kb_with_active_version, staff_api, filling_disk, media_root
):
    # given: room for the first file and part of the second
    kb = kb_with_active_version
    before = versions_of(kb)
    documents_before = Document.objects.count()
    filling_disk.free_bytes = 30_000
    first, second = text_file("差旅制度.txt", 20_000), text_file("报销制度.txt", 50_000)

    # when
    response = upload(staff_api, kb, first, second)

    # then
    assert response.status_code == 507, response.content
    assert response.json()["code"] == "storage_full"
    assert Document.objects.count() == documents_before
    assert files_under(media_root) == []
    assert versions_of(kb) == before

    # when: space was freed, the same upload again
    filling_disk.free_bytes = 10**9
    first.seek(0), second.seek(0)
    retried = upload(staff_api, kb, first, second)

    # then: both stored whole, in the draft; the active version still has only its own
    assert retried.status_code == 201, retried.content
    stored = {d.original_name: d for d in Document.objects.filter(original_name__in=["差旅制度.txt", "报销制度.txt"])}
    assert {name: d.file.size for name, d in stored.items()} == {"差旅制度.txt": 20_000, "报销制度.txt": 50_000}
    kb.refresh_from_db()
    assert versions_of(kb)[0] == before[0]
    assert kb.active_version_id == before[0][0]


def test_a_truncated_file_left_at_the_content_address_is_replaced_not_reused(kb, staff_api, media_root):
    # given: a write killed half-way left the first bytes of this file at its address
    upload_file = text_file("制度.txt", 40_000)
    data = upload_file.read()
    upload_file.seek(0)
    key = _storage_key(kb, hashlib.sha256(data).hexdigest())
    partial = Path(media_root) / key
    partial.parent.mkdir(parents=True, exist_ok=True)
    partial.write_bytes(data[:1000])

    # when
    response = upload(staff_api, kb, upload_file)

    # then
    assert response.status_code == 201, response.content
    document = Document.objects.get()
    assert document.file.name == key
    assert Path(media_root, key).read_bytes() == data


def test_a_full_tmpfs_refuses_the_upload_cleanly_and_takes_the_next_that_fits(kb_with_active_version, staff_api, tmpfs_media):
    # given: a 1 MiB disk
    kb = kb_with_active_version
    before = versions_of(kb)

    # when: 1.5 MB does not fit
    response = upload(staff_api, kb, text_file("大文件.txt", 1_500_000))

    # then
    assert response.status_code == 507, response.content
    assert response.json()["code"] == "storage_full"
    assert files_under(tmpfs_media) == []
    assert not Document.objects.filter(original_name="大文件.txt").exists()
    assert versions_of(kb) == before

    # when: a file that fits
    small = upload(staff_api, kb, text_file("小文件.txt", 100_000))

    # then
    assert small.status_code == 201, small.content
    assert Document.objects.get(original_name="小文件.txt").file.size == 100_000
