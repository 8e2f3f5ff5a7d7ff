"""The item catalog: finding items in text (longest name, boundaries, spellings), scoring a
question, focusing shared text on one item, curating and importing the catalog, and the tags
detection writes and staff keep."""

from __future__ import annotations

import io
import zipfile

import openpyxl
import pytest
from django.contrib.auth.models import Group, User

from knowledge.items import services as item_services
from knowledge.items.matching import CatalogItem, ItemCatalog, focus_text
from knowledge.items.tagging import detect_items, retag_knowledge_base
from knowledge.models import AuditAction, AuditEntry, Chunk, ChunkItem, Item, TagSource
from ragsite.errors import Conflict, ValidationFailed
from tests.conftest import make_document, make_kb

X1, X3, X3_PRO, VPN = 1, 2, 3, 4
CATALOG = ItemCatalog([
    CatalogItem(X1, "星河X1", codes=("XH-X1",), group="星河路由器"),
    CatalogItem(X3, "星河X3", group="星河路由器", group_aliases=("星河 X 系列",)),
    CatalogItem(X3_PRO, "星河X3 Pro", aliases=("X3Pro",), codes=("XH-X3P",), group="星河路由器"),
    CatalogItem(VPN, "XH-Connect"),
])


def score(text: str):
    return CATALOG.score(text, group_score=0.7, min_fuzzy=0.6)


# --- finding items ------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [
    "星河X3 Pro 的保修期", "星河x3pro 的保修期", "星河X3-Pro", "星河X3\nPro 的接口", "星河Ｘ３ Ｐｒｏ", "X3 Pro 多少钱",
    "XH-X3P 多重", "xh-x3p",
])
def test_every_spelling_of_a_name_is_one_mention_of_it(text):
    assert CATALOG.items_in(text) == {X3_PRO}


def test_the_longest_name_wins_and_mentions_never_overlap():
    # when
    mentions = CATALOG.mentions("星河X3 Pro 在星河X3 的基础上增加了 6GHz")

    # then
    assert [(m.item_ids, m.kind) for m in mentions] == [((X3_PRO,), "item"), ((X3,), "item")]


@pytest.mark.parametrize("text", ["星河X35 的价格", "型号 AX3 路由器", "XH-X10"])
def test_a_name_ending_in_a_letter_or_digit_does_not_run_into_one(text):
    assert CATALOG.items_in(text) == set()


def test_a_table_row_is_about_the_model_it_names_even_before_a_number():
    # the row "星河X3 2年" folds to "星河x32年": the separator still ends the name
    assert CATALOG.items_in("星河X3 2年 1年") == {X3}


def test_a_group_named_alone_tags_nothing_but_scores_every_item_of_it():
    # when
    scores = score("星河路由器多少钱？")

    # then
    assert CATALOG.items_in("星河路由器多少钱？") == set()
    assert {(s.item_id, s.score, s.kind) for s in scores} == {(X1, 0.7, "group"), (X3, 0.7, "group"),
                                                              (X3_PRO, 0.7, "group")}


def test_a_near_miss_scores_its_similarity_and_another_model_number_nothing():
    # when
    typo = score("XH-Conect 怎么安装？")
    other_model = score("星河X7 的保修期是多久？")

    # then
    assert [(s.item_id, s.kind) for s in typo] == [(VPN, "fuzzy")]
    assert 0.85 < typo[0].score < 1.0
    assert other_model == ()


def test_an_exact_name_makes_near_misses_irrelevant():
    assert [s.item_id for s in score("星河X3 和 X3Pro 哪个好")] == [X3, X3_PRO]


# --- focusing shared text -----------------------------------------------------------------------


def test_focus_keeps_the_rows_and_sentences_of_the_item_and_what_names_none():
    # given
    text = ("保修期限\n产品 整机保修期\n星河X1 1年\n星河X3 2年\n星河X3 Pro 3年\n"
            "星河X1 有 4 根天线。星河X3 Pro 有 8 根天线。\n| 星河X3 | 399元 |\n| 星河X3 Pro | 699元 |")

    # when
    focused = focus_text(text, catalog=CATALOG, item_ids=[X3_PRO])

    # then
    assert focused.splitlines() == ["保修期限", "产品 整机保修期", "星河X3 Pro 3年", "星河X3 Pro 有 8 根天线。",
                                    "| 星河X3 Pro | 699元 |"]


# --- tags -----------------------------------------------------------------------------------------


def test_a_chunk_naming_no_item_inherits_its_headings_then_its_title():
    assert detect_items(catalog=CATALOG, content="背面有 2.5G 网口。", heading_path=["手册", "星河X3 Pro 接口"],
                        title="手册") == {X3_PRO}
    assert detect_items(catalog=CATALOG, content="背面有 2.5G 网口。", heading_path=[], title="星河X1 快速入门") == {X1}
    assert detect_items(catalog=CATALOG, content="背面有 2.5G 网口。", heading_path=[],
                        title="星河X1 与星河X3 对比") == set()


@pytest.mark.django_db
def test_saving_the_catalog_retags_the_chunks_and_keeps_staffs_tags(run_tasks, staff_user,
                                                                    django_capture_on_commit_callbacks):
    # given: chunks written before the catalog existed, one of them tagged by staff
    kb = make_kb(actor=staff_user)
    document = make_document(kb)
    about_x3_pro = Chunk.objects.create(document=document, knowledge_base=kb, ordinal=0,
                                        content="星河X3 Pro 有 8 根天线。")
    listing = Chunk.objects.create(document=document, knowledge_base=kb, ordinal=1, content="型号：星河X3、星河X3 Pro")
    x3 = item_services.save_item(kb=kb, name="星河X3", actor=staff_user)
    item_services.tag_chunk(chunk=listing, item=x3, source=TagSource.EXCLUDED, actor=staff_user)

    # when: the next item is saved (detection runs after commit)
    with django_capture_on_commit_callbacks(execute=True):
        x3_pro = item_services.save_item(kb=kb, name="星河X3 Pro", aliases="X3Pro, XH-X3P", actor=staff_user)

    # then
    tags = set(ChunkItem.objects.values_list("chunk_id", "item_id", "source"))
    assert tags == {(about_x3_pro.pk, x3_pro.pk, TagSource.DETECTED), (listing.pk, x3_pro.pk, TagSource.DETECTED),
                    (listing.pk, x3.pk, TagSource.EXCLUDED)}
    assert x3_pro.aliases == ["X3Pro", "XH-X3P"]
    assert AuditEntry.objects.filter(knowledge_base=kb, action=AuditAction.ITEM_SAVED).count() == 2

    # when: the catalog loses the item
    with django_capture_on_commit_callbacks(execute=True):
        item_services.delete_item(item=x3_pro, actor=staff_user)

    # then
    assert not ChunkItem.objects.filter(item_id=x3_pro.pk).exists()
    # without X3 Pro in the catalog, "星河X3 Pro" reads as X3 again (the listing stays excluded)
    assert retag_knowledge_base(kb_id=kb.pk) == 1


@pytest.mark.django_db
def test_an_item_needs_a_name_unique_in_its_knowledge_base(staff_user):
    kb = make_kb(actor=staff_user)
    item_services.save_item(kb=kb, name="星河X3", actor=staff_user)
    with pytest.raises(Conflict):
        item_services.save_item(kb=kb, name="星河X3", actor=staff_user)
    with pytest.raises(ValidationFailed):
        item_services.save_item(kb=kb, name="  ", actor=staff_user)


# --- import ---------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_import_creates_and_updates_items_and_reports_bad_rows(staff_user):
    # given
    kb = make_kb(actor=staff_user)
    item_services.save_item(kb=kb, name="星河X3", actor=staff_user)
    table = "名称,别名,型号代码,系列\n星河X3,星河 X3,XH-X3,星河路由器\n星河X3 Pro,X3Pro；星河X3Pro,XH-X3P,星河路由器\n" \
            + "X" * 201 + ",,,\n"

    # when
    report = item_services.import_items(kb=kb, file_name="items.csv", data=table.encode(), actor=staff_user)

    # then
    assert (report.created, report.updated) == (1, 1)
    assert len(report.errors) == 1 and report.errors[0].startswith("第 4 行")
    x3_pro = Item.objects.get(knowledge_base=kb, name="星河X3 Pro")
    assert (x3_pro.aliases, x3_pro.codes, x3_pro.group) == (["X3Pro", "星河X3Pro"], ["XH-X3P"], "星河路由器")
    assert AuditEntry.objects.filter(knowledge_base=kb, action=AuditAction.ITEMS_IMPORTED).count() == 1


@pytest.mark.django_db
def test_an_xlsx_import_reads_the_first_sheet_and_a_broken_file_is_refused(staff_user):
    # given
    kb = make_kb(actor=staff_user)
    workbook = openpyxl.Workbook()
    workbook.active.append(["name", "aliases", "group"])
    workbook.active.append(["星河X1", "X1", "星河路由器"])
    buffer = io.BytesIO()
    workbook.save(buffer)

    # when
    report = item_services.import_items(kb=kb, file_name="items.xlsx", data=buffer.getvalue(), actor=staff_user)

    # then
    assert report.created == 1
    with pytest.raises(ValidationFailed) as broken:
        item_services.import_items(kb=kb, file_name="items.xlsx", data=b"PK\x03\x04 not a workbook", actor=staff_user)
    assert broken.value.code == "corrupt_file"  # the intake check every uploaded file passes
    not_a_workbook = io.BytesIO()
    with zipfile.ZipFile(not_a_workbook, "w") as archive:
        archive.writestr("notes.txt", "hello")
    with pytest.raises(ValidationFailed) as refused:
        item_services.import_items(kb=kb, file_name="items.xlsx", data=not_a_workbook.getvalue(), actor=staff_user)
    assert refused.value.code == "import_unreadable"
    with pytest.raises(ValidationFailed) as no_name:
        item_services.import_items(kb=kb, file_name="items.csv", data="别名\nX1\n".encode(), actor=staff_user)
    assert no_name.value.code == "import_no_name_column"


def test_focus_drops_the_clauses_of_a_mixed_sentence_that_are_about_other_items_only():
    # given: a FAQ answer about X3 that lists the other models' warranties in one sentence
    text = "星河X3 整机保修 2 年。其他型号：星河X1 1 年，星河X3 Pro 3 年。"

    # when
    focused = focus_text(text, catalog=CATALOG, item_ids=[X1])

    # then
    assert focused == "其他型号：星河X1 1 年。"


def test_a_question_touches_the_catalog_by_its_domain_words_or_a_model_code():
    # given
    catalog = ItemCatalog([CatalogItem(1, "星河X3 Pro", group="星河路由器", description="公司的高性能 Wi-Fi 6E 三频路由器")])

    # then: worth asking the chat model which item is meant
    assert catalog.touches("三频那款路由器保修多久？")
    assert catalog.touches("X7 多少钱？")
    # then: not about the catalog's kind of thing (common words do not count)
    assert not catalog.touches("年假有几天？")
    assert not catalog.touches("公司在哪个城市？")


@pytest.mark.django_db
def test_a_name_too_long_for_the_column_is_a_clear_error_not_a_database_one(staff_user):
    kb = make_kb(actor=staff_user)
    with pytest.raises(ValidationFailed) as refused:
        item_services.save_item(kb=kb, name="X" * 201, actor=staff_user)
    assert refused.value.code == "invalid_item"


@pytest.mark.django_db
def test_the_admin_form_refuses_too_many_aliases_on_the_page(client, staff_user):
    # given
    kb = make_kb(actor=staff_user)
    client.force_login(staff_user)

    # when
    response = client.post("/admin/knowledge/item/add/", {
        "knowledge_base": kb.pk, "name": "星河X3", "aliases_text": "\n".join(f"别名{n}" for n in range(51)),
        "codes_text": "", "group": "", "group_aliases_text": "", "description": "", "enabled": "on",
    })

    # then: the form again, with the reason, and nothing saved
    assert response.status_code == 200
    assert "别名最多 50 个。" in response.content.decode()
    assert not Item.objects.exists()


@pytest.mark.django_db
def test_a_tag_offers_only_the_editors_items_and_refuses_a_chunk_of_another_base(client, staff_user):
    # given: an editor of one knowledge base, and another base with an item and a chunk
    editors = Group.objects.create(name="kb editors")
    editor = User.objects.create_user("tagger", password="pw-tagger-123", is_staff=True)
    editor.groups.add(editors)
    mine, theirs = make_kb(actor=staff_user), make_kb(actor=staff_user)
    mine.editor_groups.add(editors)
    item = item_services.save_item(kb=mine, name="星河X3", actor=staff_user)
    item_services.save_item(kb=theirs, name="另一个知识库的型号", actor=staff_user)
    foreign_chunk = Chunk.objects.create(document=make_document(theirs), knowledge_base=theirs, ordinal=0,
                                         content="星河X3 的说明")
    client.force_login(editor)

    # when
    page = client.get("/admin/knowledge/chunkitem/add/").content.decode()
    response = client.post("/admin/knowledge/chunkitem/add/", {
        "chunk": foreign_chunk.pk, "item": item.pk, "source": TagSource.MANUAL,
    })

    # then: the other base's item is not offered, its chunk reads as not a valid choice
    assert "星河X3" in page and "另一个知识库的型号" not in page
    assert response.status_code == 200
    assert not ChunkItem.objects.exists()


def test_focus_judges_a_sentence_a_page_broke_whole_and_keeps_what_it_keeps_as_written():
    # given: PDF text whose first sentence broke at "星河X3" / "Pro …", and a notice line
    text = ("星河 X 系列共四款型号：入门款星河X1、主流款星河X3、高性能款星河X3\n"
            "Pro 和全屋覆盖的星河X5 Mesh 套装。\n"
            "所有型号均可通过 App 配置。")
    # when: about X3, then about X1 alone in a text that never breaks a line about another item
    about_x3 = focus_text(text, catalog=CATALOG, item_ids=[X3])
    unchanged = focus_text("星河X1 的保修期为\n1 年。\n所有型号均可通过 App 配置。", catalog=CATALOG, item_ids=[X1])
    # then: the broken sentence is read whole (its second half alone names no item of X3's and
    # would have been dropped) and, kept, keeps its line break; so does a text with nothing to drop
    assert about_x3 == text
    assert unchanged == "星河X1 的保修期为\n1 年。\n所有型号均可通过 App 配置。"
