"""OpenAI-compatible chat completions over the chat turn."""
