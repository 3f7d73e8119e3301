"""The windpipe catalog: datasets, versions, the ML index, splits and window plans."""
