"""The cluster config file (`iris cluster up --config FILE`): its pydantic models and reference."""

from iris.config.cluster_file import (  # what `iris.config` gave before the split
    ClusterConfig,
    LocalWorkerSpec,
    Runtime,
    WorkerGroupConfig,
    default_config,
    load_config,
    parse_config,
)

__all__ = [
    "ClusterConfig", "LocalWorkerSpec", "Runtime", "WorkerGroupConfig", "default_config", "load_config",
    "parse_config",
]  # fmt: skip
