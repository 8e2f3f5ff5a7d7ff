"""Curated FAQs: their writes (`services`), their vector index (`index`) and reads (`selectors`)."""
