"""What the knowledge admin pages share: status badges, chunk text, domain errors as messages,
the confirmation pages of version switches and deletions."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext as _

from ragsite.errors import DomainError

from knowledge.forms import SwitchVersionForm

# The layout of the knowledge and evaluation admin pages: lists that fit the window, tables of
# labelled fields, rendered FAQ answers.
ADMIN_CSS = {"all": ["knowledge/admin.css"]}
# FAQ answers are markdown: the admin renders them with the answering admin's renderer (the chat
# page's marked and DOMPurify, nothing in an answer followed), from a JSON data block per answer.
FAQ_ANSWER_JS = ["vendor/marked/marked.umd.js", "vendor/dompurify/purify.min.js", "chat/answer_markdown.js", "chat/admin_answer.js"]

# 生效中 (active) and 就绪 (ready) must not look alike: one answers questions, the other could.
STATUS_COLOURS = {
    "ready": "#0e7490", "active": "#15803d", "failed": "#b91c1c", "building": "#b45309",
    "queued": "#6b7280", "parsing": "#1d4ed8", "indexing": "#1d4ed8", "uploaded": "#6b7280",
    "retired": "#6b7280",
}



def status_badge(value: str, label: str, **data: object):
    attrs = format_html_join(" ", 'data-{}="{}"', ((k.replace("_", "-"), v) for k, v in data.items()))
    return format_html(
        '<span class="rag-status" {} style="color:{};font-weight:600">{}</span>',
        attrs, STATUS_COLOURS.get(value, "#111827"), label,
    )


def render_chunk_text(text: str):
    """A chunk as staff read it: GFM tables (how the chunker writes tables) as HTML tables,
    everything else as wrapped text. Every cell is escaped."""
    blocks, table = [], []

    def flush_table() -> None:
        rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in table
                if not set(line.replace("|", "").strip()) <= set("-: ")]
        if rows:
            head, *body = rows
            blocks.append(format_html(
                '<table class="rag-chunk-table"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>',
                format_html_join("", "<th>{}</th>", ((c,) for c in head)),
                format_html_join("", "<tr>{}</tr>", ((format_html_join("", "<td>{}</td>", ((c,) for c in row)),) for row in body)),
            ))
        table.clear()

    lines: list[str] = []
    for line in text.splitlines():
        if line.lstrip().startswith("|"):
            if lines:
                blocks.append(format_html('<div style="white-space:pre-wrap">{}</div>', "\n".join(lines)))
                lines = []
            table.append(line)
            continue
        if table:
            flush_table()
        lines.append(line)
    if table:
        flush_table()
    if lines:
        blocks.append(format_html('<div style="white-space:pre-wrap">{}</div>', "\n".join(lines)))
    return format_html_join("", "{}", ((b,) for b in blocks))


def report_error(request: HttpRequest, error: DomainError) -> None:
    messages.error(request, f"{error.message}（{error.code}）")


# --- knowledge bases ---------------------------------------------------------------------------




def confirm_switch(model_admin, request, queryset, *, action, title, describe, perform, allow_override=False):
    """Confirmation page with a required reason, then one service call per selected object
    (`perform(obj, reason, override)`; `override` is the release-check override, when offered)."""
    form = SwitchVersionForm(request.POST if request.POST.get("confirm") else None, allow_override=allow_override)
    if request.POST.get("confirm") and form.is_valid():
        for obj in queryset:
            try:
                activation = perform(obj, form.cleaned_data["reason"], form.cleaned_data.get("override_release_check", False))
            except DomainError as error:
                report_error(request, error)
            else:
                messages.success(
                    request,
                    _("%(kb)s 已切换到 v%(n)s，检索缓存已更新到第 %(epoch)s 版。")
                    % {"kb": activation.knowledge_base.name, "n": activation.to_version.number, "epoch": activation.cache_epoch},
                )
        return None
    return confirmation_page(
        model_admin, request, queryset, action=action, title=title, form=form, submit_label=_("确认"),
        intro=_("请确认以下版本切换。切换一次完成：切换生效版本、写入切换记录并更新检索缓存版本（旧的缓存结果随即不再使用）；"
                "任何一步失败时都保持原版本不变。"),
        items=[describe(obj) for obj in queryset],
    )




def format_value(value) -> str:
    return "—" if value is None else f"{value:.4f}"


def confirm_destructive(model_admin, request, queryset, *, action, title, intro, describe, perform):
    """A page saying what will be removed, then `perform(obj)` per selected object on confirm."""
    if request.POST.get("confirm"):
        for obj in queryset:
            perform(obj)
        return None
    return confirmation_page(
        model_admin, request, queryset, action=action, title=title, intro=intro, submit_label=_("确认删除"),
        items=[describe(obj) for obj in queryset],
    )


def confirmation_page(model_admin, request, queryset, *, action, title, intro, items, submit_label, form=None):
    """One page for every action that asks first: what will happen, then confirm or cancel."""
    return TemplateResponse(request, "admin/knowledge/confirm_action.html", {
        **model_admin.admin_site.each_context(request),
        "title": title, "intro": intro, "items": items, "form": form, "submit_label": submit_label,
        "queryset": queryset, "action": action, "action_checkbox_name": ACTION_CHECKBOX_NAME,
        "opts": model_admin.model._meta,
    })


# --- versions ----------------------------------------------------------------------------------


