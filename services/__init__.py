"""What the windpipe services share: settings, logging, database engine, CLI.

Importing the package sets Arrow's allocator options before pyarrow loads
(:func:`services.runtime.prefer_small_pages`).
"""

from services.runtime import prefer_small_pages

prefer_small_pages()
