"""The answerer for the deployment's chat model: the model itself when it writes, the offline
extractive answerer when it does not (the `local` provider)."""

from __future__ import annotations

from functools import lru_cache

from django.core.exceptions import ImproperlyConfigured

from engines.ports import ChatModel, Embedder
from engines.providers import get_embedder

from .extractive import ExtractiveAnswerer
from .model import model_answerer
from .ports import Answerer


def answerer_for(model: ChatModel) -> Answerer:
    if model.generative:
        return model_answerer(model)
    return extractive_answerer(_meaning())


@lru_cache(maxsize=8)
def extractive_answerer(meaning: Embedder | None) -> ExtractiveAnswerer:
    # One per embedder (its sentence vectors are cached in it); the embedder itself is cached
    # per configuration by the provider factory.
    return ExtractiveAnswerer(meaning=meaning)


def _meaning() -> Embedder | None:
    """The deployment's default embedder, which the answerer falls back on when it is calibrated
    (its sentences are compared with the question only, never with an index)."""
    try:
        return get_embedder()
    except ImproperlyConfigured:
        return None
