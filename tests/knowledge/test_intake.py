"""Every file staff give the product passes the same checks before anything parses it, and
nothing is parsed inside a transaction (`knowledge.intake`).

The probe's file: a 167 KB workbook whose string table holds 4,000,000 × `<si><t>a</t></si>`
(68 MB unpacked, ratio 409). As a document it was refused; as an item import openpyxl read it
for most of a minute inside a transaction that held SQLite's write lock, and the worker, unable
to poll, exited and took `make run` down with it.
"""

from __future__ import annotations

import io
import time
import zipfile

import openpyxl
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.urls import reverse

from evaluation.importers import read_native_file, read_shared_uploads
from knowledge.documents import services as document_services
from knowledge.intake import FileRejected
from knowledge.items import services as item_services
from knowledge.models import Document, Item
from ragsite.errors import ValidationFailed
from tests.conftest import make_kb

pytestmark = pytest.mark.django_db

STRINGS = 4_000_000


def workbook(rows: list[list[object]]) -> bytes:
    book = openpyxl.Workbook()
    for row in rows:
        book.active.append(row)
    buffer = io.BytesIO()
    book.save(buffer)
    return buffer.getvalue()


_PARTS = {
    "[Content_Types].xml": (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
        '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
        '<Default Extension="xml" ContentType="application/xml"/>'
        '<Override PartName="/xl/workbook.xml" '
        'ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/>'
        '<Override PartName="/xl/worksheets/sheet1.xml" '
        'ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/>'
        '<Override PartName="/xl/sharedStrings.xml" '
        'ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"/>'
        "</Types>"
    ),
    "_rels/.rels": (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
        '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
        'officeDocument" Target="xl/workbook.xml"/></Relationships>'
    ),
    "xl/workbook.xml": (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<workbook xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" '
        'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships">'
        '<sheets><sheet name="Sheet1" sheetId="1" r:id="rId1"/></sheets></workbook>'
    ),
    "xl/_rels/workbook.xml.rels": (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
        '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
        'worksheet" Target="worksheets/sheet1.xml"/>'
        '<Relationship Id="rId2" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
        'sharedStrings" Target="sharedStrings.xml"/></Relationships>'
    ),
    "xl/worksheets/sheet1.xml": (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData>'
        '<row r="1"><c r="A1" t="s"><v>0</v></c><c r="B1" t="s"><v>1</v></c></row>'
        "</sheetData></worksheet>"
    ),
}


def string_table_bomb(strings: int = STRINGS) -> bytes:
    """A valid workbook (a header row 名称 / 问题, from its shared string table) whose string
    table also holds `strings` one-letter strings, written in slices so the test never holds
    it unpacked: what Excel or openpyxl would read in full before the first row."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for name, text in _PARTS.items():
            archive.writestr(name, text)
        with archive.open("xl/sharedStrings.xml", "w", force_zip64=True) as member:
            member.write('<?xml version="1.0" encoding="UTF-8"?>'
                         '<sst xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">'
                         "<si><t>名称</t></si><si><t>问题</t></si>".encode())
            block = b"<si><t>a</t></si>" * 100_000
            for _ in range(strings // 100_000):
                member.write(block)
            member.write(b"</sst>")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def bomb() -> bytes:
    return string_table_bomb()


def test_the_probes_workbook_is_what_it_claims(bomb):
    # then: small packed, 68 MB unpacked, and a workbook openpyxl reads (a small one of the
    # same shape, so that reading it stays quick)
    assert len(bomb) < 400 * 1024
    unpacked = sum(info.file_size for info in zipfile.ZipFile(io.BytesIO(bomb)).infolist())
    assert unpacked > 60 * 2**20
    small = openpyxl.load_workbook(io.BytesIO(string_table_bomb(100_000)), read_only=True)
    assert next(small.worksheets[0].iter_rows(values_only=True)) == ("名称", "问题")


def test_an_item_import_refuses_the_bomb_before_parsing_it(bomb, staff_user):
    # given
    kb = make_kb()
    started = time.monotonic()
    # when
    with pytest.raises(FileRejected) as refused:
        item_services.import_items(kb=kb, file_name="items.xlsx", data=bomb, actor=staff_user)
    # then: refused by the archive's declared sizes, long before openpyxl could have read it
    assert refused.value.code == "archive_too_large"
    assert time.monotonic() - started < 10
    assert not Item.objects.exists()


@pytest.mark.parametrize("read", [
    lambda data: read_native_file("cases.xlsx", data),
    lambda data: read_shared_uploads(queries=data, qrels=b'{"query_id": "1", "doc_id": "a"}\n'),
])
def test_an_evaluation_import_refuses_the_bomb_the_same_way(bomb, read):
    with pytest.raises(FileRejected) as refused:
        read(bomb)
    assert refused.value.code == "archive_too_large"


def test_a_document_upload_refuses_the_bomb_the_same_way(bomb, staff_user, media_root):
    with pytest.raises(ValidationFailed) as refused:
        document_services.upload_documents(kb=make_kb(), actor=staff_user,
                                           files=[SimpleUploadedFile("ledger.xlsx", bomb)])
    assert refused.value.code == "archive_too_large"
    assert not Document.objects.exists()


def test_an_import_over_the_size_limit_is_refused_by_size(settings, staff_user):
    # given
    settings.RAG_MAX_IMPORT_BYTES = 1024
    # when / then
    with pytest.raises(FileRejected) as refused:
        item_services.import_items(kb=make_kb(), file_name="items.csv", data=("名称\n" + "X1\n" * 1000).encode(),
                                   actor=staff_user)
    assert refused.value.code == "file_too_large"


@pytest.mark.django_db(transaction=True)  # the test's own transaction would hide the import's
def test_a_workbook_is_parsed_outside_any_transaction(monkeypatch, staff_user):
    # given: openpyxl watched for whether a transaction is open when it reads
    seen = []
    load = openpyxl.load_workbook

    def watched(*args, **kwargs):
        seen.append(connection.in_atomic_block)
        return load(*args, **kwargs)

    monkeypatch.setattr(openpyxl, "load_workbook", watched)
    kb = make_kb()
    # when
    report = item_services.import_items(kb=kb, file_name="items.xlsx", data=workbook([["名称"], ["星河X1"]]),
                                        actor=staff_user)
    # then: read with no lock held, then written in one transaction
    assert seen == [False]
    assert report.created == 1 and Item.objects.get().name == "星河X1"


def test_an_eval_file_that_is_not_utf8_is_a_clear_error():
    with pytest.raises(ValidationFailed) as refused:
        read_native_file("cases.csv", "问题\n年假几天\n".encode("gb18030"))
    assert refused.value.code == "invalid_eval_file"


def test_an_editor_importing_the_bomb_in_the_admin_gets_the_reason(bomb, client, staff_user):
    # given: an editor of one base, signed in to the admin
    from django.contrib.auth.models import Group, User

    editors = Group.objects.create(name="kb-editors")
    kb = make_kb(actor=staff_user)
    kb.editor_groups.add(editors)
    editor = User.objects.create_user("editor", password="pw-editor-123", is_staff=True)
    editor.groups.add(editors)
    client.force_login(editor)
    # when
    response = client.post(reverse("admin:knowledge_item_import"), {
        "knowledge_base": kb.pk, "file": SimpleUploadedFile("items.xlsx", bomb),
    })
    # then: the page says why, and nothing was imported
    assert response.status_code == 200
    assert "疑似压缩炸弹" in response.content.decode()
    assert not Item.objects.exists()
