# One image for the API, workers, beat, Flower and migrations (docker-compose.yml picks the extras;
# the default image runs the API, beat, migrations and CPU workers, as ops/deploy/k8s/ uses it).
# GPU hosts: build with --build-arg EXTRAS=piper,orpheus,gpu,postgres,reports on a CUDA base (e.g.
# --build-arg BASE=nvidia/cuda:12.4.1-runtime-ubuntu22.04 with python3.11 installed).
# The `reports` extra (matplotlib) gives the nightly HTML report its plots; workers run that task.
ARG BASE=python:3.11-slim
FROM ${BASE}
ARG EXTRAS=piper,api,postgres,reports
WORKDIR /app
COPY pyproject.toml README.md ./
COPY pipeline pipeline
COPY worker worker
COPY api api
COPY cli cli
COPY migrations migrations
RUN pip install --no-cache-dir -e ".[${EXTRAS}]"
ENV SYNTH_DATA_DIR=/data
# 8000: `synth api` (and /dashboard); 9100: a worker's Prometheus metrics (SYNTH_WORKER_METRICS_PORT).
EXPOSE 8000 9100
ENTRYPOINT ["synth"]
