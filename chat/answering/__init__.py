"""Answering a question from its selected evidence, behind one port (`Answerer`).

The pipeline hands an answerer typed evidence (`AnswerRequest`: the question, the numbered
sources with their titles, text and images, the conversation so far) and streams back what it
writes. A chat model's adapter builds its own prompt from it (`model`); the offline extractive
answerer reads the same sources directly (`extractive`), with no prompt text in between.
"""
