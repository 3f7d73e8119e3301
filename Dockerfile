FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY contract contract
COPY services services
COPY catalog catalog
COPY flight_server flight_server
COPY sdk sdk
COPY migrations migrations
COPY bench bench
RUN pip install --no-cache-dir --index-url https://download.pytorch.org/whl/cpu "torch>=2.2" \
    && pip install --no-cache-dir .
ENTRYPOINT ["windpipe"]
