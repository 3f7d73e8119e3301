"""Side-by-side benchmarks: windpipe against what users would pick instead.

``python -m bench`` (or ``windpipe bench``) runs every contender in its own process
on the same data and the same schedule; see docs/benchmarks.md.

Every module here is a script run as ``python -m bench.<name>``: this package's
init runs before the script's own imports load pyarrow, so it is where a benchmark
process sets Arrow's allocator option as the servers do
(:func:`windpipe.services.runtime.prefer_small_pages`); the processes a script starts inherit it.
"""

from windpipe.services.runtime import prefer_small_pages

prefer_small_pages()
