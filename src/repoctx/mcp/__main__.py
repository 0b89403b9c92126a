"""``python -m repoctx.mcp``: the ``repoctx mcp`` command."""

from repoctx.cli.mcp import main

main()
