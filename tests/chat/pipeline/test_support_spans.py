"""The span of the source that supports an answer line: what the citation opens and highlights."""

from __future__ import annotations

from chat.contracts import Citation
from chat.pipeline.citations import attach_support

WRAPPED = (
    "1. 产品简介\n"
    "星河X3 Pro 在星河X3 的基础上增加了 6GHz 频段（Wi-Fi 6E）、\n"
    "双 2.5G 网口和 USB 3.0 接口，适合多设备、大户型和 NAS 用户。"
)


def citation(text: str) -> Citation:
    return Citation(number=1, kind="chunk", title="用户手册", text=text, score=0.9, relevance=0.9, chunk_id=7)


def test_a_sentence_the_source_broke_over_lines_is_highlighted_exactly():
    # given: the answer quotes the sentence whole, the source has a line break inside it
    sentence = "星河X3 Pro 在星河X3 的基础上增加了 6GHz 频段（Wi-Fi 6E）、双 2.5G 网口和 USB 3.0 接口，适合多设备、大户型和 NAS 用户。"
    # when
    (cited,) = attach_support((citation(WRAPPED),), answer=f"{sentence}[来源 1](citation://1)",
                              chunk_texts={7: WRAPPED})
    # then: the span is the sentence as the source writes it, line break included, in its chunk
    (span,) = cited.spans
    assert span.text == WRAPPED[WRAPPED.index("星河X3 Pro"):]
    assert (span.chunk_id, span.start, span.end) == (7, WRAPPED.index("星河X3 Pro"), len(WRAPPED))


def test_a_quote_on_one_line_keeps_its_exact_span():
    # given
    text = "WAN 口为蓝色，用于连接光猫。\nRESET 孔用于恢复出厂设置。"
    # when
    (cited,) = attach_support((citation(text),), answer="RESET 孔用于恢复出厂设置。[来源 1](citation://1)",
                              chunk_texts={7: text})
    # then
    (span,) = cited.spans
    assert (span.text, span.start) == ("RESET 孔用于恢复出厂设置。", text.index("RESET"))
