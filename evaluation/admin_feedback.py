"""Readers' 👍 / 👎 in the admin: the list staff review (by knowledge base, version and verdict)
and the page that turns a 👎 into a question of the default evaluation set."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Prefetch
from django.http import Http404, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from chat.feedback.selectors import feedback_for_review
from chat.pipeline.citations import readable_markers
from chat.models import AnswerFeedback, ChatEvidence, FeedbackVerdict, QueryTrace
from knowledge.access import Role
from knowledge.admin.common import ADMIN_CSS, report_error
from knowledge.admin.scope import KnowledgeScopedAdmin
from knowledge.models import Chunk
from ragsite.errors import DomainError

from .feedback import case_key, save_feedback_case
from .models import EvalCase

EXCERPT_CHARS = 80
NO_ANSWER = "none"
OTHER_CHUNK = "other"


def _excerpt(text: str, size: int = EXCERPT_CHARS) -> str:
    text = " ".join((text or "").split())
    return text[:size] + ("…" if len(text) > size else "")


class FeedbackCaseForm(forms.Form):
    right = forms.ChoiceField(label=gettext_lazy("正确答案在哪里"), widget=forms.RadioSelect)
    other_chunk_id = forms.IntegerField(
        label=gettext_lazy("其他分块 ID"), required=False, min_value=1,
        help_text=gettext_lazy("正确的分块不在上面时填写：可在该知识库的“命中测试”中找到它的 ID。"),
    )
    answers = forms.CharField(
        label=gettext_lazy("参考答案"), required=False, widget=forms.Textarea(attrs={"rows": 2}),
        help_text=gettext_lazy("可选，每行一个；答案评测时回答包含其中任意一个即算正确。"),
    )

    def __init__(self, *args, candidates: list[tuple[str, str]], **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["right"].choices = [
            *candidates,
            (OTHER_CHUNK, _("其他分块（在下面填写 ID）")),
            (NO_ANSWER, _("文档中没有答案（应回答“信息不足”）")),
        ]

    def clean(self):
        data = super().clean()
        if data.get("right") == OTHER_CHUNK and not data.get("other_chunk_id"):
            self.add_error("other_chunk_id", _("请填写分块 ID。"))
        return data

    def chunk_id(self) -> int | None:
        right = self.cleaned_data["right"]
        if right == NO_ANSWER:
            return None
        return self.cleaned_data["other_chunk_id"] if right == OTHER_CHUNK else int(right)


class AnswerFeedbackAdmin(KnowledgeScopedAdmin):
    """Readers' verdicts: read by the knowledge base's editors, never edited by them (a reader's
    word stays theirs); a 👎 is turned into an evaluation question on its own page."""

    list_display = ["verdict_label", "question", "answer_excerpt", "reason", "knowledge_base", "kb_version",
                    "updated_at", "case_link"]
    list_filter = ["verdict", "knowledge_base", "kb_version", "updated_at"]
    search_fields = ["reason", "message__content", "message__trace__question"]
    readonly_fields = ["verdict_label", "question", "answer", "reason", "knowledge_base", "kb_version", "trace_link",
                       "case_link", "user", "created_at", "updated_at"]
    fields = readonly_fields
    list_per_page = 50

    class Media:
        css = ADMIN_CSS

    def get_queryset(self, request):
        # The case each row links to, for the whole page in one query (not one per row).
        cases = Prefetch("eval_cases", queryset=EvalCase.objects.select_related("eval_set").order_by("pk"))
        return self.scoped(feedback_for_review().prefetch_related(cases), request.user, self.view_role)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def get_urls(self):
        return [
            path("<int:pk>/case/", self.admin_site.admin_view(self.case_view), name="chat_answerfeedback_case"),
            *super().get_urls(),
        ]

    @admin.display(description=gettext_lazy("评价"), ordering="verdict")
    def verdict_label(self, feedback: AnswerFeedback):
        mark = "👍" if feedback.verdict == FeedbackVerdict.UP else "👎"
        return format_html('<span data-verdict="{}">{} {}</span>', feedback.verdict, mark, feedback.get_verdict_display())

    @admin.display(description=gettext_lazy("问题"))
    def question(self, feedback: AnswerFeedback):
        trace = _trace_of(feedback)
        return _excerpt(trace.question) if trace is not None else "—"

    @admin.display(description=gettext_lazy("回答"))
    def answer_excerpt(self, feedback: AnswerFeedback):
        return _excerpt(readable_markers(feedback.message.content))

    @admin.display(description=gettext_lazy("回答"))
    def answer(self, feedback: AnswerFeedback):
        return readable_markers(feedback.message.content)

    @admin.display(description=gettext_lazy("问答追踪"))
    def trace_link(self, feedback: AnswerFeedback):
        trace = _trace_of(feedback)
        if trace is None:
            return "—"
        return format_html('<a href="{}">{}</a>', reverse("admin:chat_querytrace_change", args=[trace.pk]), trace.trace_id)

    @admin.display(description=gettext_lazy("评测问题"))
    def case_link(self, feedback: AnswerFeedback):
        case = next(iter(feedback.eval_cases.all()), None)
        if case is not None:
            return format_html('<a href="{}">{} · {}</a>', reverse("admin:evaluation_evalset_change", args=[case.eval_set_id]),
                               case.eval_set.name, case.key)
        if feedback.verdict != FeedbackVerdict.DOWN:
            return "—"
        return format_html('<a class="button" href="{}">{}</a>', reverse("admin:chat_answerfeedback_case", args=[feedback.pk]),
                           _("转为评测问题"))

    def case_view(self, request, pk: int):
        feedback = self.get_queryset(request).filter(pk=pk).first()
        if feedback is None:
            raise Http404
        if not self.holds(request, feedback, Role.EDITOR):
            raise PermissionDenied
        form = FeedbackCaseForm(request.POST or None, candidates=_candidates(feedback), initial=_initial(feedback))
        if request.method == "POST" and form.is_valid():
            answers = form.cleaned_data["answers"].splitlines()
            try:
                saved = save_feedback_case(feedback=feedback, actor=request.user, chunk_id=form.chunk_id(), answers=answers)
            except DomainError as error:
                report_error(request, error)
            else:
                if saved.set_created:
                    messages.info(request, _("知识库没有默认评测集，已新建默认评测集「%(set)s」。") % {"set": saved.case.eval_set.name})
                names = {"key": saved.case.key, "set": saved.case.eval_set.name}
                messages.success(request, (
                    _("已保存评测问题 %(key)s（评测集「%(set)s」），下次上线检查会评测它。") if saved.case.answerable
                    # The release check measures retrieval: a question with nothing to find is
                    # judged by the answers evaluation (did the answer say "not enough information").
                    else _("已保存不可回答的评测问题 %(key)s（评测集「%(set)s」）：答案评测会检查回答是否为“信息不足”，上线检查只评测有期望分块的问题。")
                ) % names)
                return HttpResponseRedirect(reverse("admin:chat_answerfeedback_changelist"))
        trace = _trace_of(feedback)
        return TemplateResponse(request, "admin/evaluation/feedback_case.html", {
            **self.admin_site.each_context(request), "title": _("转为评测问题"), "form": form,
            "opts": self.model._meta, "form_id": "feedback-case-form", "submit_label": _("保存评测问题"),
            "feedback": feedback, "question": trace.question if trace is not None else "",
            "answer": readable_markers(feedback.message.content),
            "hit_test_url": reverse("hit-test", args=[feedback.knowledge_base_id]),
        })


def _trace_of(feedback: AnswerFeedback) -> QueryTrace | None:
    try:
        return feedback.message.trace
    except QueryTrace.DoesNotExist:
        return None


def _candidates(feedback: AnswerFeedback) -> list[tuple[str, str]]:
    """The chunks the answer cited or retrieval found, in that order, that still exist in the
    knowledge base: the likeliest places of the right answer."""
    evidence = ChatEvidence.objects.filter(message_id=feedback.message_id).first()
    if evidence is None:
        return []
    ids = [c.get("chunk_id") for c in evidence.citations or [] if isinstance(c, dict)]
    ids += [r.get("chunk_id") for r in evidence.retrieval_results or [] if isinstance(r, dict)]
    ordered = list(dict.fromkeys(i for i in ids if isinstance(i, int) and i > 0))
    chunks = Chunk.objects.filter(pk__in=ordered, knowledge_base_id=feedback.knowledge_base_id).select_related("document")
    by_id = {chunk.pk: chunk for chunk in chunks}
    return [
        (str(pk), _("分块 %(id)s · %(title)s：%(text)s") % {
            "id": pk, "title": by_id[pk].document.title, "text": _excerpt(by_id[pk].content)})
        for pk in ordered if pk in by_id
    ]


def _initial(feedback: AnswerFeedback) -> dict:
    """What the feedback's case says now, when it has one (saving again replaces it)."""
    case = feedback.eval_cases.filter(key=case_key(feedback)).first()
    if case is None:
        return {}
    if not case.answerable:
        return {"right": NO_ANSWER, "answers": "\n".join(case.answers)}
    chunk_id = (case.expected_chunks or [None])[0]
    return {"right": str(chunk_id), "other_chunk_id": chunk_id, "answers": "\n".join(case.answers)}

