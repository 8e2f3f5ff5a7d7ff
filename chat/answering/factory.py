"""The answerer for the deployment's chat model: the model itself when it writes, the offline
extractive answerer when it does not (the `local` provider)."""

from __future__ import annotations

from functools import lru_cache

from django.core.exceptions import ImproperlyConfigured

from engines.ports import ChatModel, Embedder
from engines.providers import get_embedder

from .extractive import ExtractiveAnswerer
from .model import model_answerer
from .ports import Answerer, EvidenceJudge


def answerer_for(model: ChatModel) -> Answerer:
    if model.generative:
        return model_answerer(model)
    return extractive_answerer(default_meaning())


@lru_cache(maxsize=8)
def extractive_answerer(meaning: Embedder | None) -> ExtractiveAnswerer:
    """The offline answerer, ranked and gated by hand: that measured better than the learned
    scorer's ranking and decision (evaluation/README.md, "The learned scorer"). One per embedder
    (its sentence vectors are cached in it; the embedder is cached per configuration by the
    provider factory)."""
    return ExtractiveAnswerer(meaning=meaning, scorer=None)


@lru_cache(maxsize=8)
def _scoring_answerer(meaning: Embedder | None) -> ExtractiveAnswerer | None:
    answerer = ExtractiveAnswerer(meaning=meaning, scorer="default")
    return answerer if answerer.scorer is not None else None


def evidence_judge() -> EvidenceJudge | None:
    """The learned scorer, judging for every provider whether evidence that no word and no chunk's
    meaning let through still answers; None when no weights are committed."""
    return _scoring_answerer(default_meaning())


def default_meaning() -> Embedder | None:
    """The deployment's default embedder, which the answerer falls back on when it is calibrated
    (its sentences are compared with the question only, never with an index)."""
    try:
        return get_embedder()
    except ImproperlyConfigured:
        return None
