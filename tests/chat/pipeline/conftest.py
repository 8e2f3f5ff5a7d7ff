"""A published knowledge base built through the real pipeline, and scripted chat models."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.core.files.uploadedfile import SimpleUploadedFile

from chat.answering.extractive import ExtractiveAnswerer
from chat.answering.request import AnswerRequest
from chat.pipeline.rag import RAGService
from engines.ports import ChatMessage, ProviderUnavailable
from knowledge import epochs
from knowledge.catalog import services as catalog_services
from knowledge.documents import services as document_services
from knowledge.faqs import services as faq_services
from knowledge.models import KnowledgeBaseVersion, Visibility
from tests.conftest import make_kb

HANDBOOK = """# 员工手册

## 年假

员工累计工作满 1 年后享受带薪年假。满 1 年不满 10 年的员工每年有 7 天年假。年假须提前 3 个工作日在 OA 申请。

## 报销

报销须在费用发生后 30 天内提交。单笔 5000 元以下由部门经理审批，超过 20000 元须财务总监审批。

## 差旅住宿标准

| 城市类别 | 住宿标准 |
| --- | --- |
| 一类城市（北京、上海、深圳） | 500元/晚 |
| 其他城市 | 300元/晚 |
"""

PRODUCTS = """# 产品手册

## 星河X3

星河X3 是一款 Wi-Fi 6 路由器，推荐覆盖面积 120 平方米，整机保修 2 年。

## VPN

VPN 空闲 30 分钟后自动断开，同一账号最多 2 台设备同时连接。
"""


def publish(kb, files, actor):
    document_services.upload_documents(kb=kb, actor=actor, files=[SimpleUploadedFile(n, t.encode()) for n, t in files])
    version = KnowledgeBaseVersion.objects.get(knowledge_base=kb, status="ready")
    catalog_services.activate_version(version=version, actor=actor)
    kb.refresh_from_db()
    cache.clear()
    epochs.l1_epochs.clear()
    return kb


@pytest.fixture
def handbook_kb(milvus, run_tasks, media_root, staff_user):
    kb = make_kb(visibility=Visibility.PUBLIC)
    publish(kb, [("员工手册.md", HANDBOOK), ("产品手册.md", PRODUCTS)], staff_user)
    faq_services.save_faq(kb=kb, question="年假有多少天？", similar_questions=["带薪年假怎么计算？"],
                      answer="满 1 年不满 10 年：**7 天**。", actor=staff_user)
    faq_services.save_faq(kb=kb, question="在家怎么连接公司 VPN？", answer="安装 XH-Connect 客户端，用域账号登录。", actor=staff_user)
    cache.clear()
    return kb


class RecordingAnswerer:
    """The real extractive answerer, recording every request (so a test can prove none happened)."""

    name = "recording-extractive"

    def __init__(self) -> None:
        self.calls: list[AnswerRequest] = []
        self.inner = ExtractiveAnswerer()

    def stream(self, request, *, max_tokens=1024, temperature=0.2):
        self.calls.append(request)
        return self.inner.stream(request, max_tokens=max_tokens, temperature=temperature)


class ScriptedModel:
    """Streams fixed deltas, optionally failing after some of them, as a remote model would."""

    name = "scripted"
    generative = True

    def __init__(self, deltas, *, fail_after: int | None = None) -> None:
        self.deltas = list(deltas)
        self.fail_after = fail_after
        self.calls: list[list[ChatMessage]] = []
        self.closed = False

    def stream(self, messages, *, max_tokens=1024, temperature=0.2):
        self.calls.append(list(messages))

        def generate():
            try:
                for index, delta in enumerate(self.deltas):
                    if self.fail_after is not None and index == self.fail_after:
                        raise ProviderUnavailable("upstream said: secret-key-123 exploded")
                    yield delta
            finally:
                self.closed = True

        return generate()

    def complete(self, messages, *, max_tokens=1024, temperature=0.2):
        return "".join(self.stream(messages))


@pytest.fixture
def recording_model():
    """The pipeline's answerer, recording: pass it as `model` to the tests' `service` helpers."""
    return RecordingAnswerer()


def service_for(model) -> RAGService:
    """The pipeline answering with `model`: a recording answerer as it is, a chat model through
    the answerer the deployment would build for it."""
    if isinstance(model, RecordingAnswerer):
        return RAGService(answerer=lambda _chat_model: model)
    return RAGService(chat_model=lambda: model)
