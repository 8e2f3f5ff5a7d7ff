"""Protocols other tools already speak, over the same turn and retrieval as ragsite's own API:
OpenAI-compatible chat completions (`integrations.openai`) and an MCP server (`integrations.mcp`).

Transports only: each one authenticates, checks access and admits a question exactly as the
product's own API does, then calls the chat and retrieval services."""
