"""The offline extractive answerer: candidate units (`candidates`) scored and quoted (`composer`)."""

from .composer import ExtractiveAnswerer

__all__ = ["ExtractiveAnswerer"]
