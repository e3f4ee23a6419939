# The gridroute image the Helm chart runs (deploy/kubernetes/gridroute, image.repository):
# one image for the gateway, the operator, the control plane and `gridroute config check`.
#   docker build -t gridroute:0.1.0 .
# Multi-stage: the build stage makes a virtual environment with gridroute and the
# kubernetes client (control plane) and nats-py (NATS transport) in it; the runtime stage
# copies only that, and runs as an unprivileged user that owns nothing it could write,
# so the pod's read-only root filesystem holds.
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/gridroute
COPY pyproject.toml README.md ./
COPY src ./src
RUN /opt/gridroute/bin/pip install ".[kubernetes]" "nats-py==2.16.0" \
    && /opt/gridroute/bin/gridroute version

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="gridroute" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 gridroute \
    && useradd --system --uid 10001 --gid gridroute --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin gridroute
COPY --from=build /opt/gridroute /opt/gridroute
ENV PATH=/opt/gridroute/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MPLCONFIGDIR=/tmp/matplotlib
USER 10001:10001
# gateway API, gateway metrics, operator signals (the chart's default ports).
EXPOSE 8080 9180 9443
ENTRYPOINT ["gridroute"]
CMD ["--help"]
