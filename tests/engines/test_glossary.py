"""English questions rendered as the Chinese words they name (engines.glossary)."""

from __future__ import annotations

from engines.glossary import concepts, is_foreign, rendering, shape


def test_only_mostly_english_questions_are_foreign():
    assert is_foreign("How many days of marriage leave do employees get?")
    assert not is_foreign("星河X3 Pro 的保修期是多久？")
    assert not is_foreign("VPN 空闲多久会断开？")
    assert not is_foreign("X3")


def test_a_phrase_the_dictionary_knows_whole_wins_over_its_words():
    # given a question naming a two-word term CC-CEDICT defines as one word
    found = concepts("How many days of paternity leave can I take?")
    # then the phrase becomes one concept with that word
    assert [c.english for c in found] == ["paternity leave"]
    assert found[0].chinese[0] == "陪产假"


def test_rendering_picks_the_alternative_the_evidence_uses():
    # given an English word with several Chinese renderings
    question = "What is the VPN idle timeout?"
    # when it is rendered against evidence that writes one of them
    text = rendering(question, "VPN 连接空闲 30 分钟后自动断开")
    # then that one is used, codes stay as written, and the question word follows
    assert "空闲" in text and "vpn" in text
    assert "断开" in text
    assert text.endswith("？")


def test_question_words_become_the_chinese_kind_of_answer():
    assert shape("How many days of annual leave?") == "几天"
    assert shape("How long is the probation period?") == "多久"
    assert shape("Where is the IT service desk?") == "在哪里"
    assert rendering("the") == ""


def test_search_words_offer_every_alternative_of_each_concept():
    from engines.glossary import search_words

    words = search_words("What is the router's management address?").split()
    assert {"路由器", "管理", "地址"} <= set(words)


def test_a_model_name_and_a_number_stay_as_written():
    # when: a model whose suffix is also an English word, and a number
    rendered = rendering("How long is the X3 Pro warranty?", "星河X3 Pro 的整机保修期是 3 年。")
    found = concepts("Is the 3 year warranty for the X5 Mesh?")
    # then: "Pro" is part of the name (never "professional"), "3" is kept
    assert rendered == "X3 Pro 保修期多久？"
    assert [c.english for c in found] == ["3", "year", "warranty", "x5 mesh"] and found[-1].chinese == ("X5 Mesh",)
