"""The offline provider: lexical embedder, lexical reranker, the chat model that writes nothing, OCR captions."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engines.ports import (
    Captioner,
    ChatMessage,
    ChatModel,
    Embedder,
    ProviderUnavailable,
    QueryRewriter,
    Reranker,
)
from engines.providers.local import (
    IdentityRewriter,
    LocalCaptioner,
    LocalHashingEmbedder,
    LocalLexicalReranker,
    OfflineChatModel,
)

REPO = Path(__file__).resolve().parents[3]

def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_local_adapters_satisfy_the_ports():
    # given / when / then
    assert isinstance(LocalHashingEmbedder(), Embedder)
    assert isinstance(LocalLexicalReranker(), Reranker)
    assert isinstance(IdentityRewriter(), QueryRewriter)
    assert isinstance(OfflineChatModel(), ChatModel)
    assert isinstance(LocalCaptioner(), Captioner)


# --- embedder -----------------------------------------------------------------------------------


def test_embeddings_are_unit_vectors_of_the_requested_dimension():
    # given
    embedder = LocalHashingEmbedder(dimension=256)

    # when
    vectors = embedder.embed_documents(["年假按工龄计算", "Reset the VPN password"])

    # then
    assert embedder.model == "local-hash-lexical-v1"
    assert [len(v) for v in vectors] == [256, 256]
    assert all(math.isclose(cosine(v, v), 1.0) for v in vectors)


def test_shared_words_make_texts_closer_than_unrelated_ones():
    # given
    embedder = LocalHashingEmbedder()
    query = embedder.embed_query("年假怎么计算")

    # when
    related, unrelated = embedder.embed_documents(
        ["员工年假按工龄计算，满一年享受5天。", "差旅报销需提交发票原件。"]
    )

    # then
    assert cosine(query, related) > 0.2
    assert cosine(query, related) > cosine(query, unrelated) + 0.15


def test_case_and_full_width_forms_do_not_matter():
    # given
    embedder = LocalHashingEmbedder()

    # when
    upper, lower = embedder.embed_documents(["ＥＲＰ系统", "erp系统"])

    # then
    assert cosine(upper, lower) == pytest.approx(1.0)


def test_texts_without_features_get_one_shared_unit_vector():
    # given
    embedder = LocalHashingEmbedder()

    # when
    empty, blank, punctuation, text = embedder.embed_documents(["", "   ", "。！？", "年假"])

    # then
    assert empty == blank == punctuation
    assert math.isclose(cosine(empty, empty), 1.0)
    assert abs(cosine(empty, text)) < 0.5


def test_vectors_are_identical_in_another_process():
    # given: another interpreter, with a different str hash seed
    embedder = LocalHashingEmbedder(dimension=128)
    text = "报销流程：提交发票，部门经理审批。"
    script = (
        "import json;from engines.providers.local import LocalHashingEmbedder;"
        f"print(json.dumps(LocalHashingEmbedder(dimension=128).embed_query({text!r})))"
    )

    # when
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
        capture_output=True,
        text=True,
        check=True,
    )

    # then
    assert json.loads(result.stdout) == pytest.approx(embedder.embed_query(text), abs=1e-12)


def test_embedding_many_chunks_takes_seconds():
    # given
    embedder = LocalHashingEmbedder()
    embedder.embed_query("预热")
    chunks = [
        f"第{i}条：员工因公出差发生的交通、住宿费用，应在返回后十个工作日内提交报销申请，"
        "并附发票原件、行程单和审批记录。财务部门审核通过后五个工作日内付款。" * 3
        for i in range(1000)
    ]

    # when
    started = time.perf_counter()
    vectors = embedder.embed_documents(chunks)
    elapsed = time.perf_counter() - started

    # then: about 1 s per 2,000 chunks of this size here; 10k chunks stay in seconds
    assert len(vectors) == 1000
    assert elapsed < 5


# --- reranker -----------------------------------------------------------------------------------


def test_reranker_puts_the_document_covering_the_query_first():
    # given
    reranker = LocalLexicalReranker()
    documents = [
        "差旅报销需提交发票原件。",
        "年假年假年假，年假很重要。",
        "员工年假按工龄计算，申请年假需提前三天在系统提交。",
    ]

    # when
    scores = reranker.rerank("年假申请需要提前几天", documents, top_n=2)

    # then
    assert [s.index for s in scores] == [2, 1]
    assert scores[0].score > scores[1].score


def test_reranker_ties_keep_the_input_order_and_respect_top_n():
    # given
    reranker = LocalLexicalReranker()

    # when
    scores = reranker.rerank("量子计算", ["年假", "报销", "病假", "事假"], top_n=3)

    # then
    assert [s.index for s in scores] == [0, 1, 2]
    assert reranker.rerank("年假", ["年假"], top_n=0) == []
    assert reranker.rerank("年假", [], top_n=3) == []


def test_identity_rewriter_adds_nothing():
    # given / when / then
    assert IdentityRewriter().rewrite("年假怎么算") is None
    assert IdentityRewriter().name == "none"


# --- captioner ----------------------------------------------------------------------------------


def test_caption_is_ocr_text_plus_context():
    # given
    captioner = LocalCaptioner()

    # when
    caption = captioner.caption(
        image_jpeg=b"\xff\xd8", context="  下图为报销流程\n", ocr_text="提交\n审批  付款"
    )

    # then
    assert caption == "图片：提交 审批 付款（上下文：下图为报销流程）"
    assert captioner.name == "local-ocr"


def test_caption_without_any_text_still_says_it_is_an_image():
    # given / when
    caption = LocalCaptioner().caption(image_jpeg=b"\xff\xd8", context="")

    # then
    assert caption.startswith("图片：")


def test_the_offline_chat_model_writes_nothing_and_says_so():
    # given: what HyDE or a model rewrite would ask of it
    model = OfflineChatModel()
    hyde = [ChatMessage("user", "请写一段可能回答以下问题的文字：年假有几天？")]
    # when / then: no generative model; answers come from chat.answering.extractive
    assert model.generative is False and model.name == "local-extractive"
    with pytest.raises(ProviderUnavailable):
        model.stream(hyde)
    with pytest.raises(ProviderUnavailable):
        model.complete(hyde)
