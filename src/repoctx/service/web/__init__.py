"""The service's web pages (``/`` and ``/ui/...``): Jinja2 templates, plain ES modules and CSS served from this
package, code highlighted on the server with Pygments. No build step, no CDN.

The pages and their assets are public: they hold no data. Every datum comes from the JSON API with the API key
the user typed in, which the page keeps in ``sessionStorage`` (this tab only) and sends as a Bearer header, so a
page shows exactly what the key may read. ``routes.py`` adds the few authenticated reads the pages need that the
API did not have: ``GET /whoami``, ``GET /file`` (the copilot's ``read_file`` under the key's scope, highlighted),
``POST /highlight``, ``GET /sessions`` and ``GET /sessions/{id}``."""

from repoctx.service.web.routes import PAGE_PATHS, PAGE_PREFIX, mount_static, web_router

__all__ = ["web_router", "mount_static", "PAGE_PATHS", "PAGE_PREFIX"]
