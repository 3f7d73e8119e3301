"""One router per resource; routes only translate HTTP to ``catalog.service`` calls."""
