# The server image: catalog, migrations, Flight server and OpenTelemetry (off until
# WINDPIPE_OTEL=1); no torch (no server module imports it; clients bring their own).
FROM python:3.11.11-slim-bookworm
WORKDIR /app
COPY pyproject.toml README.md ./
# every dependency pinned with its hashes (deploy/requirements.lock, from pyproject.toml)
COPY deploy/requirements.lock deploy/requirements.lock
RUN pip install --no-cache-dir --require-hashes -r deploy/requirements.lock
COPY windpipe windpipe
RUN pip install --no-cache-dir --no-deps ".[server,otel]"
ENTRYPOINT ["windpipe"]
