"""``python -m repoctx.mcp``: the ``repoctx mcp`` command."""

from repoctx.mcp.server import main

main()
