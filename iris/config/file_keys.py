"""The cluster config's own keys (`local.worker_groups`, `scale_groups`, `autoscaler`), described for the reference.

The keys, their types and defaults come from the pydantic models that read the file (`iris/config/cluster_file.py`);
only the words live here. `iris.config.reference.file_reference()` fails on a field that has no words here
and on words for a field that no longer exists, so a new key cannot reach the reference
(docs/configuration.md) undescribed.
"""

from __future__ import annotations

from pydantic import BaseModel

from iris.config.cluster_file import AutoscalerFile, ResourcesFile, ScaleGroupFile, WorkerGroupFile

DURATION = "duration (`30s`, `5m`, `1h`, seconds)"
PLATFORM_BLOCK = "mapping", "this platform's settings (below); a block for another platform is an error"

SECTIONS: tuple[tuple[str, type[BaseModel], str], ...] = (
    ("local.worker_groups[]", WorkerGroupFile, "The local cluster's fixed workers: each is its own `iris worker "
     "serve` process on this machine, so one can die without the others (at most 64 in all)."),
    ("scale_groups[]", ScaleGroupFile, "Slices of `hosts_per_slice` identical hosts that the autoscaler creates "
     "when pending work needs them and deletes when they have been idle for `scale_down_delay`. Each host also "
     "gets the attributes `tpu-name` (the slice id), `tpu-worker-id` (its index), `iris-slice-id` and "
     "`iris-scale-group`."),
    ("resources", ResourcesFile, "A host's capacity, in a worker group or a scale group."),
    ("autoscaler", AutoscalerFile, "How the autoscaler paces itself."),
)  # fmt: skip

# (model, field) -> (type in words, or None for the type the model declares; what it is)
WORDS: dict[tuple[type[BaseModel], str], tuple[str | None, str]] = {
    (WorkerGroupFile, "name"): (None, "the group's name, unique among all groups (it prefixes worker ids)"),
    (WorkerGroupFile, "count"): (None, "how many workers (agents) the group has"),
    (WorkerGroupFile, "resources"): ("mapping", "each worker's capacity (`resources` below)"),
    (WorkerGroupFile, "attributes"): ("map", "attributes every worker of the group has; constraints match them"),
    (WorkerGroupFile, "index_attribute"): (None, "an attribute set to each worker's index in the group, e.g. "
                                                 "`tpu-worker-id`"),
    (WorkerGroupFile, "runtime"): (None, "how the agents run tasks: a host process, or a container per task"),
    (WorkerGroupFile, "image"): (None, "the agents' default image; a job's `image` wins, the process runtime "
                                       "ignores images"),
    (ScaleGroupFile, "name"): (None, "the group's name, unique among all groups (it prefixes slice ids)"),
    (ScaleGroupFile, "platform"): (None, "where slices come from; its settings go under a key named after it"),
    (ScaleGroupFile, "hosts_per_slice"): (None, "hosts in one slice (gcp: the accelerator type's VM count; "
                                                "coreweave: 1)"),
    (ScaleGroupFile, "min_slices"): (None, "slices kept even when idle"),
    (ScaleGroupFile, "max_slices"): (None, "the most slices the group grows to"),
    (ScaleGroupFile, "buffer_slices"): (None, "idle READY slices kept beyond demand (within `max_slices`), so new "
                                              "work starts without waiting for a slice to boot"),
    (ScaleGroupFile, "resources"): ("mapping", "one host's capacity (`resources` below); default none"),
    (ScaleGroupFile, "attributes"): ("map", "attributes every host has, e.g. `tpu-topology: v5e-16` (what "
                                            "`iris run --tpu v5e-16` asks for: lets the autoscaler match it)"),
    (ScaleGroupFile, "scale_up_delay"): (DURATION, "the least time between two scale-ups of the group "
                                                   "(the first is at once)"),
    (ScaleGroupFile, "scale_down_delay"): (DURATION, "how long a slice stays idle before it is deleted"),
    (ScaleGroupFile, "runtime"): (None, "how the agents run tasks"),
    (ScaleGroupFile, "image"): (None, "the agents' default image"),
    (ScaleGroupFile, "local"): PLATFORM_BLOCK,
    (ScaleGroupFile, "manual"): PLATFORM_BLOCK,
    (ScaleGroupFile, "gcp"): PLATFORM_BLOCK,
    (ScaleGroupFile, "coreweave"): PLATFORM_BLOCK,
    (ResourcesFile, "cpu"): ("cores (`0.5`, `2`; to 1/1000)", "CPU"),
    (ResourcesFile, "memory"): ("size (`512m`, `2g`, `1.5Gi`, bytes)", "memory"),
    (ResourcesFile, "gpus"): (None, "GPUs"),
    (ResourcesFile, "tpus"): (None, "TPU chips"),
    (AutoscalerFile, "scan_interval"): (DURATION, "how often the autoscaler looks while slices run work or a "
                                                  "group keeps `buffer_slices` (2 s while slices boot or drain); "
                                                  "otherwise the scheduler wakes it when a job cannot be placed"),
    (AutoscalerFile, "backoff"): (DURATION, "a group's first back-off after its slices failed (quota exhausted: at "
                                            "once; else 2 in a row), doubling with each further failure to 600 s; a "
                                            "refusal by the platform backs off 600 s (doubling to an hour)"),
    (AutoscalerFile, "slice_heartbeat_timeout"): (DURATION, "how long a slice's create, bootstrap, watch, drain or "
                                                            "terminate may go without a heartbeat before a live "
                                                            "controller runs it again (the one running it died); "
                                                            "5 s to 600 s"),
}  # fmt: skip
