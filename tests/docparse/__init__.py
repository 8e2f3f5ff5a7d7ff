"""Tests of the Django-free document parsers and chunker."""
