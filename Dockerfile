# One image for the API, workers and migrations. GPU hosts: build with --build-arg EXTRAS=piper,orpheus,gpu
# on a CUDA base (e.g. --build-arg BASE=nvidia/cuda:12.4.1-runtime-ubuntu22.04 with python3.11 installed).
ARG BASE=python:3.11-slim
FROM ${BASE}
ARG EXTRAS=piper,postgres
WORKDIR /app
COPY pyproject.toml README.md ./
COPY pipeline pipeline
COPY worker worker
COPY api api
COPY cli cli
COPY migrations migrations
RUN pip install --no-cache-dir -e ".[${EXTRAS}]"
ENV SYNTH_DATA_DIR=/data
ENTRYPOINT ["synth"]
