# stride in a container: the image `stride launch k8s` names by default (stride:<version>).
#
#   docker build -t stride:0.1.0 .                          # CPU: torch from PyTorch's CPU wheel index
#   docker build -t stride:0.1.0 --build-arg CUDA=cu128 .   # CUDA: torch's cu128 wheels (CUDA runtime inside)
#
# The tag is the package version (pyproject.toml): a versioned tag makes Kubernetes use an image already on
# the node (imagePullPolicy IfNotPresent) and pull it otherwise, so push it to your registry, or pass
# `stride launch k8s --image registry/stride:0.1.0` after `docker tag`/`docker push`.
ARG PYTHON=3.11
FROM python:${PYTHON}-slim

# CUDA: empty for the CPU build, or a PyTorch wheel index name (cu126, cu128, ...) for a GPU build.
ARG CUDA=
ARG TORCH_VERSION=2.13.0
ENV PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/stride
# torch first, from the index that matches the build (it is the big layer; stride's code changes more often)
RUN pip install "torch==${TORCH_VERSION}" --index-url "https://download.pytorch.org/whl/${CUDA:-cpu}"
COPY pyproject.toml README.md ./
COPY stride ./stride
COPY configs ./configs
# observe: TensorBoard and Prometheus exporters (metrics.tensorboard / metrics.prometheus)
RUN pip install ".[observe]" && stride --version

# `stride launch k8s` runs `torchrun ... -m stride.cli.main train /etc/stride/config.toml --out /runs/<name>`
WORKDIR /runs
CMD ["stride", "--help"]
