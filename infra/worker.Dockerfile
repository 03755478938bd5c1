# The Iris worker agent: `iris worker serve` on one host.
# Runtimes: `process` runs tasks inside this container; `docker` and `containerd` talk to the host's
# engine through the Python clients installed with Iris (docker SDK, CRI over gRPC), so mount the
# engine's socket (/var/run/docker.sock or /run/containerd/containerd.sock) and no CLI is needed.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}
ARG PIP_INSTALL="pip install --no-cache-dir"
WORKDIR /opt/iris
COPY pyproject.toml README.md ./
COPY scheduler scheduler
COPY workflows workflows
COPY activities activities
COPY worker_agent worker_agent
COPY iris iris
RUN ${PIP_INSTALL} .
ENV PYTHONPATH=/opt/iris${PYTHONPATH:+:$PYTHONPATH} \
    PYTHONUNBUFFERED=1 \
    IRIS_HEALTH_HOST=0.0.0.0 \
    IRIS_HEALTH_PORT=8080
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/health', timeout=4)"]
ENTRYPOINT ["python3", "-m", "iris"]
CMD ["worker", "serve"]
