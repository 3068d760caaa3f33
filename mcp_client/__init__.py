"""Tools of MCP servers as `/commands` (SPEC 14, client side), for any model.

An operator lists the servers it trusts in the file `MCP_SERVERS` names (`config.py`). The
app builds one `McpHub` (`hub.py`): one event loop on its own thread runs the official SDK
(`mcp`, anyio), one supervised connection per server (`connection.py`: a stdio child restarted
with back-off, or a streamable-HTTP session behind the SSRF rules, `http.py`), and each
server's allowed tools join the app's registry through the generic binding (`tools.py`).
A turn's worker thread calls into the loop with the call's deadline and the turn's cancel
token; what comes back becomes data within SPEC 12's caps (`results.py`).

Imports: tools (the `Tool` unit, the generic binding, the SSRF address rules), storage (images
are stored like uploads), config, foundation. Named `mcp_client`, never `mcp`: that is the SDK.
"""
