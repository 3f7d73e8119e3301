"""The catalog REST API (FastAPI): ``create_app`` builds it."""
