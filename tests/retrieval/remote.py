"""Retrieval against a remote provider: the fake OpenAI-compatible server on 127.0.0.1, reached
through the real `openai` SDK the provider adapters use, and knowledge bases built through the
real ingestion (upload → parse → chunk → embed → Milvus Lite).

The fake server and the provider settings are the shared `provider_server` / `openai_provider`
fixtures (tests/conftest.py).
"""

from __future__ import annotations

from django.core.files.uploadedfile import SimpleUploadedFile

from knowledge.documents import services as document_services
from knowledge.models import KnowledgeBase, Visibility
from tests.conftest import make_kb, publish_draft
from tests.fakes.provider_server import FakeProviderServer

# Fourteen sections far apart in wording: each is a chunk of its own, so a question has more
# than ten candidates to rerank.
SECTIONS = [
    ("年假", "入职满一年的员工每年享有 15 天带薪年假，需提前三个工作日在 OA 系统申请。"),
    ("病假", "病假需要提供二级以上医院的诊断证明，三天以内由直属主管审批。"),
    ("婚假", "员工登记结婚可享受 10 天婚假，需在登记后一年内休完。"),
    ("差旅住宿", "一线城市住宿标准为每晚 600 元，其他城市为每晚 400 元。"),
    ("报销", "报销须在费用发生后 30 天内提交，附上发票原件。"),
    ("VPN", "VPN 空闲 30 分钟后会自动断开，同一账号最多两台设备同时连接。"),
    ("密码", "域账号密码每 90 天需要修改一次，新密码不能与最近 5 次相同。"),
    ("打印机", "打印机卡纸时先关闭电源，再打开前盖取出纸张。"),
    ("会议室", "会议室通过企业微信预约，每次最长预约四小时。"),
    ("门禁", "门禁卡丢失后请在当天到行政前台挂失并补办，补办费用 20 元。"),
    ("星河X3", "星河X3 是一款 Wi-Fi 6 路由器，保修期为 24 个月，保修期内免费更换。"),
    ("星河X5", "星河X5 是一款 Wi-Fi 7 路由器，推荐覆盖面积 200 平方米，保修期为 36 个月。"),
    ("食堂", "员工食堂午餐时间为 11:30 到 13:30，刷工卡消费。"),
    ("班车", "公司班车早上 7:40 从地铁站发车，晚上 18:10 从园区返回。"),
]
HANDBOOK = "# 员工与产品手册\n\n" + "\n\n".join(f"## {title}\n\n{text}" for title, text in SECTIONS) + "\n"
QUESTION = "星河X3 的保修期是多久？"


def published_kb(*, actor, documents: dict[str, str] | None = None) -> KnowledgeBase:
    """A knowledge base in the settings' embedding space whose documents went through real
    ingestion and whose version is active. Needs `milvus`, `run_tasks` and `media_root`."""
    kb = make_kb(visibility=Visibility.PUBLIC, actor=actor)
    uploads = [SimpleUploadedFile(name, text.encode()) for name, text in (documents or {"手册.md": HANDBOOK}).items()]
    document_services.upload_documents(kb=kb, actor=actor, files=uploads)
    return publish_draft(kb, actor=actor)


def chat_bodies(server: FakeProviderServer) -> list[dict]:
    """The non-streamed chat completions the server received (rewrites and HyDE generations)."""
    return [r.body for r in server.requests("openai.chat") if isinstance(r.body, dict) and not r.body.get("stream")]


def embedded_texts(server: FakeProviderServer) -> list[str]:
    """Every text the server was asked to embed, in order."""
    texts: list[str] = []
    for record in server.requests("openai.embeddings"):
        body = record.body if isinstance(record.body, dict) else {}
        given = body.get("input", [])
        texts.extend([given] if isinstance(given, str) else given)
    return texts
