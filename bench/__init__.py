"""Side-by-side benchmarks: windpipe against what users would pick instead.

``python -m bench`` (or ``windpipe bench``) runs every contender in its own process
on the same data and the same schedule; see docs/benchmarks.md.
"""

import services  # noqa: F401  (first: sets Arrow's allocator options, services.runtime)
