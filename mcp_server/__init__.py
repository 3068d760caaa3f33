"""Our tools for other MCP hosts: `/mcp`, streamable HTTP, one user per bearer token (SPEC 14).

An MCP host (Claude Desktop, the MCP Inspector, an IDE) lists and calls the tools that
`POST /tools/<name>` serves, through the official SDK's server (`mcp`, stateless, JSON answers).
Nothing about a call is decided here: the budget, the runner, the user's scope and the caps
are `api/tools.py`'s `direct_call`, so a call over `/mcp` behaves as the same call over HTTP.
What is here is the transport: who the token belongs to, a bounded body, the tool list from
each tool's models and hints, the result as MCP content, and threads for the blocking calls.
Beside the tools, the user's memories and workspace files are resources (`resources.py`,
`resource_uris.py`), with two prompts (`prompts.py`) and completions (`completion.py`), under
the same scope and the `tools` budget (`reads.py`, `read_handlers.py`).

Floor 13, just above `api/`: it imports the app's services and its direct call; `serving/` routes
`/mcp` to it and runs its lifespan.
"""
