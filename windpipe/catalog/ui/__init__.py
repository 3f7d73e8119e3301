"""The catalog's read-only web pages under ``/ui`` (docs/ui.md).

Server-rendered Jinja2 templates and server-drawn SVG: no script runs in the browser, and
every asset is served by the catalog itself. The pages call the same service layer as
the REST API and take the same tokens and dataset scopes. ``routes`` holds the pages and
:func:`~catalog.ui.routes.mount_ui`; ``access`` the caller, the scope checks and the
security headers; ``pages`` and ``segment`` what each page shows; ``queries`` the few
reads the REST API has no route for; ``downsample`` and ``plot`` the segment plot,
``split_plot`` and ``plan_plot`` the split's and the plan's; ``servers`` the look at
every Flight server.
"""

from __future__ import annotations

from windpipe.catalog.ui.routes import mount_ui

__all__ = ["mount_ui"]
