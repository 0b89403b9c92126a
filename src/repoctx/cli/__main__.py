"""``python -m repoctx.cli``: the ``repoctx`` command."""

from repoctx.cli import app

app()
