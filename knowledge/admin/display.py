"""How the knowledge admin pages word what is stored as codes, numbers and JSON.

Each helper takes a stored value and returns text in words, or escaped HTML built with
`format_html`, so that a staff member reads "pptx 演示文稿" and "解析 92 ms" instead of
"application/vnd.openxmlformats-…" and `{"stage_seconds": {"parse": 0.092}}`. The raw value stays
available where it helps people who talk to operations about it: as the words' tooltip, or in a
collapsed block.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from engines.analysis import ANALYSIS_VERSION
from engines.analysis import LEGACY_ANALYSIS

from knowledge.documents.sniffing import MIME_TYPES

# Document formats as staff name them, by `Document.file_type`: what the file is, and the
# extension they see in its name.
FILE_TYPES = {
    "pdf": gettext_lazy("PDF 文档"),
    "docx": gettext_lazy("docx 文档"),
    "xlsx": gettext_lazy("xlsx 表格"),
    "pptx": gettext_lazy("pptx 演示文稿"),
    "csv": gettext_lazy("csv 表格"),
    "md": gettext_lazy("Markdown 文本"),
    "html": gettext_lazy("html 网页"),
    "txt": gettext_lazy("txt 纯文本"),
    "png": gettext_lazy("png 图片"),
    "jpeg": gettext_lazy("jpeg 图片"),
}
_FILE_TYPE_OF_MIME = {mime: file_type for file_type, mime in MIME_TYPES.items()}

# The text analyses a knowledge base's keyword index may use (`KnowledgeBase.text_analysis`).
TEXT_ANALYSES = {
    ANALYSIS_VERSION: gettext_lazy("中文分词 v1（型号与编码整体匹配，繁体按简体匹配，英文按词形匹配，支持领域词典）"),
    LEGACY_ANALYSIS: gettext_lazy("结巴分词（早期知识库使用的旧方式，型号会在连字符处被拆开）"),
}

# The stages of a document's processing run, in the order they run (`knowledge.documents.ingestion.runner`).
INGESTION_STAGES = {
    "parse": gettext_lazy("解析"),
    "chunk": gettext_lazy("切分"),
    "assets": gettext_lazy("图片说明"),
    "embed": gettext_lazy("向量化"),
    "store": gettext_lazy("保存分块"),
    "upsert": gettext_lazy("写入检索索引"),
}


def duration_label(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min"


def worker_label(worker: str) -> str:
    """The process that handled a document, written "host:pid" by the ingestion worker."""
    host, separator, pid = worker.rpartition(":")
    if not worker:
        return "—"
    if separator and host and pid.isdigit():
        return _("主机 %(host)s · 进程号 %(pid)s") % {"host": host, "pid": pid}
    return worker


def file_type_label(file_type: str) -> str:
    return str(FILE_TYPES.get(file_type, file_type or "—"))


def file_format(file_type: str, mime_type: str) -> SafeString:
    """The format in words; its MIME type is the tooltip."""
    words = FILE_TYPES.get(file_type) or FILE_TYPES.get(_FILE_TYPE_OF_MIME.get(mime_type, ""))
    if words is None:
        return format_html("{}", " · ".join(part for part in (file_type, mime_type) if part) or "—")
    return quiet_code(str(words), mime_type)


def size_label(size: int) -> str:
    exact = _("%(n)s 字节") % {"n": f"{size:,}"}
    if size < 1024:
        return exact
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KB（{exact}）"
    return f"{size / 1024 / 1024:.1f} MB（{exact}）"


def text_analysis_label(analysis: str) -> str:
    return str(TEXT_ANALYSES.get(analysis, analysis or "—"))


def quiet_code(words: str, code: str) -> SafeString:
    """The words, with the stored code as their tooltip when it says something they do not."""
    if not code or words == code:
        return format_html("{}", words or "—")
    return format_html('<span class="rag-code" title="{}">{}</span>', code, words)


def _pages(numbers: Sequence[Any]) -> str:
    return _("第 %(pages)s 页") % {"pages": "、".join(str(n) for n in numbers)}


def _stage_table(seconds: Mapping[str, Any]) -> SafeString:
    timed = {name: value for name, value in seconds.items() if isinstance(value, (int, float))}
    order = [name for name in INGESTION_STAGES if name in timed] + sorted(set(timed) - set(INGESTION_STAGES))
    rows = [(str(INGESTION_STAGES.get(name, name)), duration_label(float(timed[name]))) for name in order]
    rows.append((_("合计"), duration_label(sum(float(v) for v in timed.values()))))
    return format_html(
        '<table class="rag-stage-times"><tbody>{}</tbody></table>',
        format_html_join("", "<tr><th>{}</th><td>{}</td></tr>", rows),
    )


def _metadata_value(key: str, value: Any) -> tuple[str, SafeString | str]:
    if key == "stage_seconds" and isinstance(value, Mapping):
        return _("各阶段耗时"), _stage_table(value)
    if key == "warnings" and isinstance(value, list):
        if not value:
            return _("警告"), _("无")
        return _("警告"), format_html('<ul class="rag-warnings">{}</ul>', format_html_join("", "<li>{}</li>", ((w,) for w in value)))
    if key == "ocr_pages" and isinstance(value, list):
        return _("文字识别（OCR）页"), _pages(value) if value else _("无（文字直接从文件中读取）")
    if key == "batch_documents" and isinstance(value, int):
        if value <= 1:
            return _("同批处理的文档"), _("仅此 1 个")
        return _("同批处理的文档"), _("%(n)s 个（向量化与写入的耗时按文档数平均分摊）") % {"n": value}
    if key == "text_encoding" and isinstance(value, str):
        return _("文本编码"), value
    if key == "title_from_file_name" and isinstance(value, bool):
        return _("标题来源"), _("文件名（文档自带标题时改用文档标题）") if value else _("文档自带标题")
    return key, json.dumps(value, ensure_ascii=False)


METADATA_ORDER = ("stage_seconds", "warnings", "ocr_pages", "batch_documents", "text_encoding", "title_from_file_name")


def metadata_table(metadata: Mapping[str, Any] | None) -> SafeString | str:
    """A document's processing facts as labelled fields, with the stored JSON collapsed below."""
    if not metadata:
        return "—"
    keys = [key for key in METADATA_ORDER if key in metadata] + sorted(set(metadata) - set(METADATA_ORDER))
    rows = [_metadata_value(key, metadata[key]) for key in keys]
    return format_html(
        '<table class="rag-fields"><tbody>{}</tbody></table>'
        '<details class="rag-raw"><summary>{}</summary><pre>{}</pre></details>',
        format_html_join("", "<tr><th>{}</th><td>{}</td></tr>", rows),
        _("原始数据（JSON）"), json.dumps(metadata, ensure_ascii=False, indent=2),
    )


def region_label(box: Sequence[Any]) -> str:
    """A rectangle on a page, [page, x0, y0, x1, y1] in PDF points, as a reader would say it."""
    if len(box) != 5 or not all(isinstance(v, (int, float)) for v in box):
        return json.dumps(list(box), ensure_ascii=False)
    page, x0, y0, x1, y1 = box
    return _("第 %(page)s 页 (%(x0).0f, %(y0).0f)–(%(x1).0f, %(y1).0f)") % {
        "page": page, "x0": x0, "y0": y0, "x1": x1, "y1": y1}


def regions_label(boxes: Sequence[Any] | None) -> SafeString | str:
    """Where a chunk's text sits on its pages: a count per page, the rectangles collapsed below."""
    boxes = [box for box in boxes or [] if isinstance(box, (list, tuple)) and box]
    if not boxes:
        return "—"
    per_page: dict[Any, int] = {}
    for box in boxes:
        per_page[box[0]] = per_page.get(box[0], 0) + 1
    summary = "；".join(_("第 %(page)s 页 %(n)s 处") % {"page": page, "n": n} for page, n in per_page.items())
    return format_html(
        '{}<details class="rag-raw"><summary>{}</summary><ul>{}</ul></details>',
        summary, _("坐标（单位：点，1/72 英寸）"),
        format_html_join("", "<li>{}</li>", ((region_label(box),) for box in boxes)),
    )
