# The server image: catalog, migrations and Flight server, without torch (no server
# module imports it; the training client installs windpipe with its own torch build).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY services services
COPY catalog catalog
COPY migrations migrations
COPY flight_server flight_server
COPY sdk sdk
COPY windpipe windpipe
RUN pip install --no-cache-dir ".[server]"
ENTRYPOINT ["windpipe"]
