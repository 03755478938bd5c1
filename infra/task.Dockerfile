# The base of task images for docker/containerd workers: Python and cloudpickle, which Iris's task
# runner (mounted into the container by the agent) needs to run a shipped function. Put your own
# dependencies on top (FROM iris-task) and submit with `--image`.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}
ARG PIP_INSTALL="pip install --no-cache-dir"
RUN ${PIP_INSTALL} "cloudpickle>=3.0"
ENV PYTHONUNBUFFERED=1
WORKDIR /work
CMD ["python3"]
