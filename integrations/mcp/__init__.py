"""An MCP server (streamable HTTP) over the knowledge bases a caller may read."""
