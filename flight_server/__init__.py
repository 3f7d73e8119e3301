"""The windpipe Arrow Flight data plane: chunk cache, materialization, tickets, server."""

import services  # noqa: F401  (first: sets Arrow's allocator options, services.runtime)
