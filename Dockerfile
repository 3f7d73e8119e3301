FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY contract contract
COPY services services
COPY storage storage
COPY planning planning
COPY materialize materialize
COPY catalog catalog
COPY migrations migrations
COPY flight_server flight_server
COPY sdk sdk
COPY bench bench
COPY windpipe windpipe
RUN pip install --no-cache-dir --index-url https://download.pytorch.org/whl/cpu "torch>=2.2" \
    && pip install --no-cache-dir .
ENTRYPOINT ["windpipe"]
