"""The windpipe catalog: datasets, versions, the ML index, splits and window plans."""

import services  # noqa: F401  (first: sets Arrow's allocator options, services.runtime)
