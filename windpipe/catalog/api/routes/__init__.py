"""One router per resource; routes only translate HTTP to ``windpipe.catalog.service`` calls."""
