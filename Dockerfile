# The server image: catalog, migrations and Flight server, without torch (no server
# module imports it; the training client installs windpipe with its own torch build).
FROM python:3.11.11-slim-bookworm
WORKDIR /app
COPY pyproject.toml README.md ./
# every dependency pinned with its hashes (deploy/requirements.lock, from pyproject.toml)
COPY deploy/requirements.lock deploy/requirements.lock
RUN pip install --no-cache-dir --require-hashes -r deploy/requirements.lock
COPY windpipe windpipe
RUN pip install --no-cache-dir --no-deps ".[server]"
ENTRYPOINT ["windpipe"]
