"""The product's version, in one place: what `/mcp` reports as `serverInfo.version`.

The project publishes no releases and declared no product version anywhere, only `"1"` where
a version was asked for (the OpenAPI document's `info.version`, the MCP client's `clientInfo`
in `mcp_client/connection.py`); this takes that number. Raise it here when a release is cut.
"""

from __future__ import annotations

VERSION = "1"
