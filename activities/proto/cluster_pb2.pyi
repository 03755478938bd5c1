from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AttributeValue(_message.Message):
    __slots__ = ("string_value", "int_value", "float_value", "bool_value")
    STRING_VALUE_FIELD_NUMBER: _ClassVar[int]
    INT_VALUE_FIELD_NUMBER: _ClassVar[int]
    FLOAT_VALUE_FIELD_NUMBER: _ClassVar[int]
    BOOL_VALUE_FIELD_NUMBER: _ClassVar[int]
    string_value: str
    int_value: int
    float_value: float
    bool_value: bool
    def __init__(self, string_value: _Optional[str] = ..., int_value: _Optional[int] = ..., float_value: _Optional[float] = ..., bool_value: _Optional[bool] = ...) -> None: ...

class Resources(_message.Message):
    __slots__ = ("cpu_millis", "memory_bytes", "gpus", "tpus")
    CPU_MILLIS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    TPUS_FIELD_NUMBER: _ClassVar[int]
    cpu_millis: int
    memory_bytes: int
    gpus: int
    tpus: int
    def __init__(self, cpu_millis: _Optional[int] = ..., memory_bytes: _Optional[int] = ..., gpus: _Optional[int] = ..., tpus: _Optional[int] = ...) -> None: ...

class Constraint(_message.Message):
    __slots__ = ("key", "op", "value", "values", "soft")
    KEY_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    SOFT_FIELD_NUMBER: _ClassVar[int]
    key: str
    op: str
    value: AttributeValue
    values: _containers.RepeatedCompositeFieldContainer[AttributeValue]
    soft: bool
    def __init__(self, key: _Optional[str] = ..., op: _Optional[str] = ..., value: _Optional[_Union[AttributeValue, _Mapping]] = ..., values: _Optional[_Iterable[_Union[AttributeValue, _Mapping]]] = ..., soft: _Optional[bool] = ...) -> None: ...

class Entrypoint(_message.Message):
    __slots__ = ("function_blob", "command")
    FUNCTION_BLOB_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    function_blob: str
    command: Command
    def __init__(self, function_blob: _Optional[str] = ..., command: _Optional[_Union[Command, _Mapping]] = ...) -> None: ...

class Command(_message.Message):
    __slots__ = ("argv",)
    ARGV_FIELD_NUMBER: _ClassVar[int]
    argv: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, argv: _Optional[_Iterable[str]] = ...) -> None: ...

class JobRequest(_message.Message):
    __slots__ = ("job_id", "name", "user", "resources", "replicas", "constraints", "coschedule_group_by", "max_task_failures", "max_retries_failure", "max_retries_preemption", "scheduling_timeout_seconds", "env", "entrypoint", "image", "tolerations", "priority", "submitted_at", "tpu_variant", "bundle_blob", "setup", "launch_blob", "coschedule_num_groups", "ports", "parent_job_id", "namespace", "reservation", "reservation_constraints", "band", "after", "after_rule", "max_concurrent", "schedule")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    CONSTRAINTS_FIELD_NUMBER: _ClassVar[int]
    COSCHEDULE_GROUP_BY_FIELD_NUMBER: _ClassVar[int]
    MAX_TASK_FAILURES_FIELD_NUMBER: _ClassVar[int]
    MAX_RETRIES_FAILURE_FIELD_NUMBER: _ClassVar[int]
    MAX_RETRIES_PREEMPTION_FIELD_NUMBER: _ClassVar[int]
    SCHEDULING_TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    ENTRYPOINT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    TOLERATIONS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_AT_FIELD_NUMBER: _ClassVar[int]
    TPU_VARIANT_FIELD_NUMBER: _ClassVar[int]
    BUNDLE_BLOB_FIELD_NUMBER: _ClassVar[int]
    SETUP_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_BLOB_FIELD_NUMBER: _ClassVar[int]
    COSCHEDULE_NUM_GROUPS_FIELD_NUMBER: _ClassVar[int]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    PARENT_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    RESERVATION_FIELD_NUMBER: _ClassVar[int]
    RESERVATION_CONSTRAINTS_FIELD_NUMBER: _ClassVar[int]
    BAND_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    AFTER_RULE_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENT_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    name: str
    user: str
    resources: Resources
    replicas: int
    constraints: _containers.RepeatedCompositeFieldContainer[Constraint]
    coschedule_group_by: str
    max_task_failures: int
    max_retries_failure: int
    max_retries_preemption: int
    scheduling_timeout_seconds: float
    env: _containers.ScalarMap[str, str]
    entrypoint: Entrypoint
    image: str
    tolerations: _containers.RepeatedScalarFieldContainer[str]
    priority: int
    submitted_at: float
    tpu_variant: str
    bundle_blob: str
    setup: _containers.RepeatedScalarFieldContainer[str]
    launch_blob: str
    coschedule_num_groups: int
    ports: _containers.RepeatedScalarFieldContainer[str]
    parent_job_id: str
    namespace: str
    reservation: _containers.RepeatedCompositeFieldContainer[Resources]
    reservation_constraints: _containers.RepeatedCompositeFieldContainer[Constraint]
    band: str
    after: _containers.RepeatedScalarFieldContainer[str]
    after_rule: str
    max_concurrent: int
    schedule: str
    def __init__(self, job_id: _Optional[str] = ..., name: _Optional[str] = ..., user: _Optional[str] = ..., resources: _Optional[_Union[Resources, _Mapping]] = ..., replicas: _Optional[int] = ..., constraints: _Optional[_Iterable[_Union[Constraint, _Mapping]]] = ..., coschedule_group_by: _Optional[str] = ..., max_task_failures: _Optional[int] = ..., max_retries_failure: _Optional[int] = ..., max_retries_preemption: _Optional[int] = ..., scheduling_timeout_seconds: _Optional[float] = ..., env: _Optional[_Mapping[str, str]] = ..., entrypoint: _Optional[_Union[Entrypoint, _Mapping]] = ..., image: _Optional[str] = ..., tolerations: _Optional[_Iterable[str]] = ..., priority: _Optional[int] = ..., submitted_at: _Optional[float] = ..., tpu_variant: _Optional[str] = ..., bundle_blob: _Optional[str] = ..., setup: _Optional[_Iterable[str]] = ..., launch_blob: _Optional[str] = ..., coschedule_num_groups: _Optional[int] = ..., ports: _Optional[_Iterable[str]] = ..., parent_job_id: _Optional[str] = ..., namespace: _Optional[str] = ..., reservation: _Optional[_Iterable[_Union[Resources, _Mapping]]] = ..., reservation_constraints: _Optional[_Iterable[_Union[Constraint, _Mapping]]] = ..., band: _Optional[str] = ..., after: _Optional[_Iterable[str]] = ..., after_rule: _Optional[str] = ..., max_concurrent: _Optional[int] = ..., schedule: _Optional[str] = ...) -> None: ...

class Launch(_message.Message):
    __slots__ = ("argv", "env", "setup")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ARGV_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    SETUP_FIELD_NUMBER: _ClassVar[int]
    argv: _containers.RepeatedScalarFieldContainer[str]
    env: _containers.ScalarMap[str, str]
    setup: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, argv: _Optional[_Iterable[str]] = ..., env: _Optional[_Mapping[str, str]] = ..., setup: _Optional[_Iterable[str]] = ...) -> None: ...

class WorkerMetadata(_message.Message):
    __slots__ = ("worker_id", "capacity", "attributes", "runtime", "host", "agent_session", "address", "port_range_start", "port_range_end", "heartbeat_timeout_seconds")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: AttributeValue
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[AttributeValue, _Mapping]] = ...) -> None: ...
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    AGENT_SESSION_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PORT_RANGE_START_FIELD_NUMBER: _ClassVar[int]
    PORT_RANGE_END_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    capacity: Resources
    attributes: _containers.MessageMap[str, AttributeValue]
    runtime: str
    host: str
    agent_session: str
    address: str
    port_range_start: int
    port_range_end: int
    heartbeat_timeout_seconds: float
    def __init__(self, worker_id: _Optional[str] = ..., capacity: _Optional[_Union[Resources, _Mapping]] = ..., attributes: _Optional[_Mapping[str, AttributeValue]] = ..., runtime: _Optional[str] = ..., host: _Optional[str] = ..., agent_session: _Optional[str] = ..., address: _Optional[str] = ..., port_range_start: _Optional[int] = ..., port_range_end: _Optional[int] = ..., heartbeat_timeout_seconds: _Optional[float] = ...) -> None: ...

class WorkerBatch(_message.Message):
    __slots__ = ("workers", "reply_to", "rows")
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    REPLY_TO_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    workers: _containers.RepeatedCompositeFieldContainer[WorkerMetadata]
    reply_to: str
    rows: _containers.RepeatedCompositeFieldContainer[WorkerRow]
    def __init__(self, workers: _Optional[_Iterable[_Union[WorkerMetadata, _Mapping]]] = ..., reply_to: _Optional[str] = ..., rows: _Optional[_Iterable[_Union[WorkerRow, _Mapping]]] = ...) -> None: ...

class WorkerBatches(_message.Message):
    __slots__ = ("batches",)
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    batches: _containers.RepeatedCompositeFieldContainer[WorkerBatch]
    def __init__(self, batches: _Optional[_Iterable[_Union[WorkerBatch, _Mapping]]] = ...) -> None: ...

class TaskStatus(_message.Message):
    __slots__ = ("task_index", "task_id", "state", "worker_id", "attempt", "failure_count", "preemption_count", "exit_code", "error", "has_exit_code", "result_blob", "peak_memory_bytes", "cpu_seconds", "duration_seconds", "endpoints")
    class EndpointsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    FAILURE_COUNT_FIELD_NUMBER: _ClassVar[int]
    PREEMPTION_COUNT_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    HAS_EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    RESULT_BLOB_FIELD_NUMBER: _ClassVar[int]
    PEAK_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    CPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    DURATION_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    task_index: int
    task_id: str
    state: str
    worker_id: str
    attempt: int
    failure_count: int
    preemption_count: int
    exit_code: int
    error: str
    has_exit_code: bool
    result_blob: str
    peak_memory_bytes: int
    cpu_seconds: float
    duration_seconds: float
    endpoints: _containers.ScalarMap[str, str]
    def __init__(self, task_index: _Optional[int] = ..., task_id: _Optional[str] = ..., state: _Optional[str] = ..., worker_id: _Optional[str] = ..., attempt: _Optional[int] = ..., failure_count: _Optional[int] = ..., preemption_count: _Optional[int] = ..., exit_code: _Optional[int] = ..., error: _Optional[str] = ..., has_exit_code: _Optional[bool] = ..., result_blob: _Optional[str] = ..., peak_memory_bytes: _Optional[int] = ..., cpu_seconds: _Optional[float] = ..., duration_seconds: _Optional[float] = ..., endpoints: _Optional[_Mapping[str, str]] = ...) -> None: ...

class JobStatus(_message.Message):
    __slots__ = ("job_id", "name", "state", "num_tasks", "task_state_counts", "error", "pending_reason", "submitted_at", "finished_at", "tasks", "user", "compact", "parent_job_id", "namespace", "priority", "effective_priority", "preemptions", "after", "after_rule", "max_concurrent")
    class TaskStateCountsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    NUM_TASKS_FIELD_NUMBER: _ClassVar[int]
    TASK_STATE_COUNTS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    PENDING_REASON_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    COMPACT_FIELD_NUMBER: _ClassVar[int]
    PARENT_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    EFFECTIVE_PRIORITY_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIONS_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    AFTER_RULE_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    name: str
    state: str
    num_tasks: int
    task_state_counts: _containers.ScalarMap[str, int]
    error: str
    pending_reason: str
    submitted_at: float
    finished_at: float
    tasks: _containers.RepeatedCompositeFieldContainer[TaskStatus]
    user: str
    compact: bool
    parent_job_id: str
    namespace: str
    priority: str
    effective_priority: str
    preemptions: int
    after: _containers.RepeatedScalarFieldContainer[str]
    after_rule: str
    max_concurrent: int
    def __init__(self, job_id: _Optional[str] = ..., name: _Optional[str] = ..., state: _Optional[str] = ..., num_tasks: _Optional[int] = ..., task_state_counts: _Optional[_Mapping[str, int]] = ..., error: _Optional[str] = ..., pending_reason: _Optional[str] = ..., submitted_at: _Optional[float] = ..., finished_at: _Optional[float] = ..., tasks: _Optional[_Iterable[_Union[TaskStatus, _Mapping]]] = ..., user: _Optional[str] = ..., compact: _Optional[bool] = ..., parent_job_id: _Optional[str] = ..., namespace: _Optional[str] = ..., priority: _Optional[str] = ..., effective_priority: _Optional[str] = ..., preemptions: _Optional[int] = ..., after: _Optional[_Iterable[str]] = ..., after_rule: _Optional[str] = ..., max_concurrent: _Optional[int] = ...) -> None: ...

class JobHandover(_message.Message):
    __slots__ = ("status", "open_tasks", "next_task", "has_children")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    OPEN_TASKS_FIELD_NUMBER: _ClassVar[int]
    NEXT_TASK_FIELD_NUMBER: _ClassVar[int]
    HAS_CHILDREN_FIELD_NUMBER: _ClassVar[int]
    status: JobStatus
    open_tasks: _containers.RepeatedScalarFieldContainer[int]
    next_task: int
    has_children: bool
    def __init__(self, status: _Optional[_Union[JobStatus, _Mapping]] = ..., open_tasks: _Optional[_Iterable[int]] = ..., next_task: _Optional[int] = ..., has_children: _Optional[bool] = ...) -> None: ...

class WorkerStatus(_message.Message):
    __slots__ = ("worker_id", "healthy", "attributes", "capacity", "committed", "running_tasks", "cordoned")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: AttributeValue
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[AttributeValue, _Mapping]] = ...) -> None: ...
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    HEALTHY_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    RUNNING_TASKS_FIELD_NUMBER: _ClassVar[int]
    CORDONED_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    healthy: bool
    attributes: _containers.MessageMap[str, AttributeValue]
    capacity: Resources
    committed: Resources
    running_tasks: _containers.RepeatedScalarFieldContainer[str]
    cordoned: bool
    def __init__(self, worker_id: _Optional[str] = ..., healthy: _Optional[bool] = ..., attributes: _Optional[_Mapping[str, AttributeValue]] = ..., capacity: _Optional[_Union[Resources, _Mapping]] = ..., committed: _Optional[_Union[Resources, _Mapping]] = ..., running_tasks: _Optional[_Iterable[str]] = ..., cordoned: _Optional[bool] = ...) -> None: ...

class SchedulingJob(_message.Message):
    __slots__ = ("job_id", "task_indices", "request", "constraints", "group_by", "priority", "scheduling_timeout_seconds", "tolerations", "reason_crc", "num_groups", "band", "user", "submitted_at", "max_concurrent", "placed", "room_at")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_INDICES_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    CONSTRAINTS_FIELD_NUMBER: _ClassVar[int]
    GROUP_BY_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    SCHEDULING_TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    TOLERATIONS_FIELD_NUMBER: _ClassVar[int]
    REASON_CRC_FIELD_NUMBER: _ClassVar[int]
    NUM_GROUPS_FIELD_NUMBER: _ClassVar[int]
    BAND_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_AT_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENT_FIELD_NUMBER: _ClassVar[int]
    PLACED_FIELD_NUMBER: _ClassVar[int]
    ROOM_AT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    task_indices: _containers.RepeatedScalarFieldContainer[int]
    request: Resources
    constraints: _containers.RepeatedCompositeFieldContainer[Constraint]
    group_by: str
    priority: int
    scheduling_timeout_seconds: float
    tolerations: _containers.RepeatedScalarFieldContainer[str]
    reason_crc: int
    num_groups: int
    band: str
    user: str
    submitted_at: float
    max_concurrent: int
    placed: int
    room_at: float
    def __init__(self, job_id: _Optional[str] = ..., task_indices: _Optional[_Iterable[int]] = ..., request: _Optional[_Union[Resources, _Mapping]] = ..., constraints: _Optional[_Iterable[_Union[Constraint, _Mapping]]] = ..., group_by: _Optional[str] = ..., priority: _Optional[int] = ..., scheduling_timeout_seconds: _Optional[float] = ..., tolerations: _Optional[_Iterable[str]] = ..., reason_crc: _Optional[int] = ..., num_groups: _Optional[int] = ..., band: _Optional[str] = ..., user: _Optional[str] = ..., submitted_at: _Optional[float] = ..., max_concurrent: _Optional[int] = ..., placed: _Optional[int] = ..., room_at: _Optional[float] = ...) -> None: ...

class SchedulingFleet(_message.Message):
    __slots__ = ("rows", "used_cpu_millis", "used_memory_bytes", "used_gpus", "used_tpus")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    USED_CPU_MILLIS_FIELD_NUMBER: _ClassVar[int]
    USED_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    USED_GPUS_FIELD_NUMBER: _ClassVar[int]
    USED_TPUS_FIELD_NUMBER: _ClassVar[int]
    rows: _containers.RepeatedScalarFieldContainer[bytes]
    used_cpu_millis: _containers.RepeatedScalarFieldContainer[int]
    used_memory_bytes: _containers.RepeatedScalarFieldContainer[int]
    used_gpus: _containers.RepeatedScalarFieldContainer[int]
    used_tpus: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, rows: _Optional[_Iterable[bytes]] = ..., used_cpu_millis: _Optional[_Iterable[int]] = ..., used_memory_bytes: _Optional[_Iterable[int]] = ..., used_gpus: _Optional[_Iterable[int]] = ..., used_tpus: _Optional[_Iterable[int]] = ...) -> None: ...

class SchedulingQueue(_message.Message):
    __slots__ = ("specs", "job_ids", "spec", "task_counts", "task_indices", "submitted_at", "reason_crc", "placed", "room_at")
    SPECS_FIELD_NUMBER: _ClassVar[int]
    JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    TASK_COUNTS_FIELD_NUMBER: _ClassVar[int]
    TASK_INDICES_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_AT_FIELD_NUMBER: _ClassVar[int]
    REASON_CRC_FIELD_NUMBER: _ClassVar[int]
    PLACED_FIELD_NUMBER: _ClassVar[int]
    ROOM_AT_FIELD_NUMBER: _ClassVar[int]
    specs: _containers.RepeatedCompositeFieldContainer[SchedulingJob]
    job_ids: _containers.RepeatedScalarFieldContainer[str]
    spec: _containers.RepeatedScalarFieldContainer[int]
    task_counts: _containers.RepeatedScalarFieldContainer[int]
    task_indices: _containers.RepeatedScalarFieldContainer[int]
    submitted_at: _containers.RepeatedScalarFieldContainer[float]
    reason_crc: _containers.RepeatedScalarFieldContainer[int]
    placed: _containers.RepeatedScalarFieldContainer[int]
    room_at: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, specs: _Optional[_Iterable[_Union[SchedulingJob, _Mapping]]] = ..., job_ids: _Optional[_Iterable[str]] = ..., spec: _Optional[_Iterable[int]] = ..., task_counts: _Optional[_Iterable[int]] = ..., task_indices: _Optional[_Iterable[int]] = ..., submitted_at: _Optional[_Iterable[float]] = ..., reason_crc: _Optional[_Iterable[int]] = ..., placed: _Optional[_Iterable[int]] = ..., room_at: _Optional[_Iterable[float]] = ...) -> None: ...

class ShareUser(_message.Message):
    __slots__ = ("user", "balance", "used", "usage", "usage_as_of")
    USER_FIELD_NUMBER: _ClassVar[int]
    BALANCE_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    USAGE_AS_OF_FIELD_NUMBER: _ClassVar[int]
    user: str
    balance: float
    used: float
    usage: float
    usage_as_of: float
    def __init__(self, user: _Optional[str] = ..., balance: _Optional[float] = ..., used: _Optional[float] = ..., usage: _Optional[float] = ..., usage_as_of: _Optional[float] = ...) -> None: ...

class ShareRates(_message.Message):
    __slots__ = ("cpu_core_hour", "memory_gib_hour", "gpu_hour", "tpu_chip_hour")
    CPU_CORE_HOUR_FIELD_NUMBER: _ClassVar[int]
    MEMORY_GIB_HOUR_FIELD_NUMBER: _ClassVar[int]
    GPU_HOUR_FIELD_NUMBER: _ClassVar[int]
    TPU_CHIP_HOUR_FIELD_NUMBER: _ClassVar[int]
    cpu_core_hour: float
    memory_gib_hour: float
    gpu_hour: float
    tpu_chip_hour: float
    def __init__(self, cpu_core_hour: _Optional[float] = ..., memory_gib_hour: _Optional[float] = ..., gpu_hour: _Optional[float] = ..., tpu_chip_hour: _Optional[float] = ...) -> None: ...

class ShareHeadroom(_message.Message):
    __slots__ = ("group", "slices", "hosts_per_slice", "host_capacity", "attributes")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: AttributeValue
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[AttributeValue, _Mapping]] = ...) -> None: ...
    GROUP_FIELD_NUMBER: _ClassVar[int]
    SLICES_FIELD_NUMBER: _ClassVar[int]
    HOSTS_PER_SLICE_FIELD_NUMBER: _ClassVar[int]
    HOST_CAPACITY_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    group: str
    slices: int
    hosts_per_slice: int
    host_capacity: Resources
    attributes: _containers.MessageMap[str, AttributeValue]
    def __init__(self, group: _Optional[str] = ..., slices: _Optional[int] = ..., hosts_per_slice: _Optional[int] = ..., host_capacity: _Optional[_Union[Resources, _Mapping]] = ..., attributes: _Optional[_Mapping[str, AttributeValue]] = ...) -> None: ...

class ShareTeam(_message.Message):
    __slots__ = ("name", "members", "quota", "borrowing_limit", "lending_limit")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    QUOTA_FIELD_NUMBER: _ClassVar[int]
    BORROWING_LIMIT_FIELD_NUMBER: _ClassVar[int]
    LENDING_LIMIT_FIELD_NUMBER: _ClassVar[int]
    name: str
    members: _containers.RepeatedScalarFieldContainer[str]
    quota: Resources
    borrowing_limit: Resources
    lending_limit: Resources
    def __init__(self, name: _Optional[str] = ..., members: _Optional[_Iterable[str]] = ..., quota: _Optional[_Union[Resources, _Mapping]] = ..., borrowing_limit: _Optional[_Union[Resources, _Mapping]] = ..., lending_limit: _Optional[_Union[Resources, _Mapping]] = ...) -> None: ...

class ShareInput(_message.Message):
    __slots__ = ("users", "default_credits", "rates", "half_life_hours", "headroom", "placed", "row_positions", "evicting_jobs", "evicting_tasks", "evicting_attempts", "teams", "starvation_seconds", "typical_task_seconds")
    USERS_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_CREDITS_FIELD_NUMBER: _ClassVar[int]
    RATES_FIELD_NUMBER: _ClassVar[int]
    HALF_LIFE_HOURS_FIELD_NUMBER: _ClassVar[int]
    HEADROOM_FIELD_NUMBER: _ClassVar[int]
    PLACED_FIELD_NUMBER: _ClassVar[int]
    ROW_POSITIONS_FIELD_NUMBER: _ClassVar[int]
    EVICTING_JOBS_FIELD_NUMBER: _ClassVar[int]
    EVICTING_TASKS_FIELD_NUMBER: _ClassVar[int]
    EVICTING_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    TEAMS_FIELD_NUMBER: _ClassVar[int]
    STARVATION_SECONDS_FIELD_NUMBER: _ClassVar[int]
    TYPICAL_TASK_SECONDS_FIELD_NUMBER: _ClassVar[int]
    users: _containers.RepeatedCompositeFieldContainer[ShareUser]
    default_credits: float
    rates: ShareRates
    half_life_hours: float
    headroom: _containers.RepeatedCompositeFieldContainer[ShareHeadroom]
    placed: bytes
    row_positions: _containers.RepeatedScalarFieldContainer[int]
    evicting_jobs: _containers.RepeatedScalarFieldContainer[str]
    evicting_tasks: _containers.RepeatedScalarFieldContainer[int]
    evicting_attempts: _containers.RepeatedScalarFieldContainer[int]
    teams: _containers.RepeatedCompositeFieldContainer[ShareTeam]
    starvation_seconds: float
    typical_task_seconds: float
    def __init__(self, users: _Optional[_Iterable[_Union[ShareUser, _Mapping]]] = ..., default_credits: _Optional[float] = ..., rates: _Optional[_Union[ShareRates, _Mapping]] = ..., half_life_hours: _Optional[float] = ..., headroom: _Optional[_Iterable[_Union[ShareHeadroom, _Mapping]]] = ..., placed: _Optional[bytes] = ..., row_positions: _Optional[_Iterable[int]] = ..., evicting_jobs: _Optional[_Iterable[str]] = ..., evicting_tasks: _Optional[_Iterable[int]] = ..., evicting_attempts: _Optional[_Iterable[int]] = ..., teams: _Optional[_Iterable[_Union[ShareTeam, _Mapping]]] = ..., starvation_seconds: _Optional[float] = ..., typical_task_seconds: _Optional[float] = ...) -> None: ...

class SchedulingSnapshot(_message.Message):
    __slots__ = ("fleet", "queue", "reservations", "now", "share")
    FLEET_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    RESERVATIONS_FIELD_NUMBER: _ClassVar[int]
    NOW_FIELD_NUMBER: _ClassVar[int]
    SHARE_FIELD_NUMBER: _ClassVar[int]
    fleet: SchedulingFleet
    queue: SchedulingQueue
    reservations: _containers.RepeatedCompositeFieldContainer[SchedulingReservation]
    now: float
    share: ShareInput
    def __init__(self, fleet: _Optional[_Union[SchedulingFleet, _Mapping]] = ..., queue: _Optional[_Union[SchedulingQueue, _Mapping]] = ..., reservations: _Optional[_Iterable[_Union[SchedulingReservation, _Mapping]]] = ..., now: _Optional[float] = ..., share: _Optional[_Union[ShareInput, _Mapping]] = ...) -> None: ...

class SchedulingReservation(_message.Message):
    __slots__ = ("reservation_id", "job_id", "entries", "constraints", "tolerations", "held", "used", "waited_seconds", "held_once")
    class UsedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Resources
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Resources, _Mapping]] = ...) -> None: ...
    RESERVATION_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    CONSTRAINTS_FIELD_NUMBER: _ClassVar[int]
    TOLERATIONS_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    WAITED_SECONDS_FIELD_NUMBER: _ClassVar[int]
    HELD_ONCE_FIELD_NUMBER: _ClassVar[int]
    reservation_id: str
    job_id: str
    entries: _containers.RepeatedCompositeFieldContainer[Resources]
    constraints: _containers.RepeatedCompositeFieldContainer[Constraint]
    tolerations: _containers.RepeatedScalarFieldContainer[str]
    held: _containers.RepeatedCompositeFieldContainer[ReservationHold]
    used: _containers.MessageMap[str, Resources]
    waited_seconds: float
    held_once: bool
    def __init__(self, reservation_id: _Optional[str] = ..., job_id: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[Resources, _Mapping]]] = ..., constraints: _Optional[_Iterable[_Union[Constraint, _Mapping]]] = ..., tolerations: _Optional[_Iterable[str]] = ..., held: _Optional[_Iterable[_Union[ReservationHold, _Mapping]]] = ..., used: _Optional[_Mapping[str, Resources]] = ..., waited_seconds: _Optional[float] = ..., held_once: _Optional[bool] = ...) -> None: ...

class ReservationHold(_message.Message):
    __slots__ = ("reservation_id", "entry", "worker_id")
    RESERVATION_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    reservation_id: str
    entry: int
    worker_id: str
    def __init__(self, reservation_id: _Optional[str] = ..., entry: _Optional[int] = ..., worker_id: _Optional[str] = ...) -> None: ...

class SchedulingEviction(_message.Message):
    __slots__ = ("job_id", "task_indices", "band", "preemptor", "reason")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_INDICES_FIELD_NUMBER: _ClassVar[int]
    BAND_FIELD_NUMBER: _ClassVar[int]
    PREEMPTOR_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    task_indices: _containers.RepeatedScalarFieldContainer[int]
    band: str
    preemptor: str
    reason: str
    def __init__(self, job_id: _Optional[str] = ..., task_indices: _Optional[_Iterable[int]] = ..., band: _Optional[str] = ..., preemptor: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class SchedulingAssignment(_message.Message):
    __slots__ = ("job_id", "task_index", "worker_id")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    task_index: int
    worker_id: str
    def __init__(self, job_id: _Optional[str] = ..., task_index: _Optional[int] = ..., worker_id: _Optional[str] = ...) -> None: ...

class TimedOutTask(_message.Message):
    __slots__ = ("job_id", "task_index")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    task_index: int
    def __init__(self, job_id: _Optional[str] = ..., task_index: _Optional[int] = ...) -> None: ...

class QueueEntry(_message.Message):
    __slots__ = ("job_id", "estimated_start", "basis")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_START_FIELD_NUMBER: _ClassVar[int]
    BASIS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    estimated_start: float
    basis: str
    def __init__(self, job_id: _Optional[str] = ..., estimated_start: _Optional[float] = ..., basis: _Optional[str] = ...) -> None: ...

class SchedulingPlan(_message.Message):
    __slots__ = ("assignments", "timed_out", "pending_reasons", "reservation_holds", "reservation_reasons", "evictions", "effective_bands", "batch_ends", "batched", "queue")
    class PendingReasonsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class ReservationReasonsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class EffectiveBandsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    TIMED_OUT_FIELD_NUMBER: _ClassVar[int]
    PENDING_REASONS_FIELD_NUMBER: _ClassVar[int]
    RESERVATION_HOLDS_FIELD_NUMBER: _ClassVar[int]
    RESERVATION_REASONS_FIELD_NUMBER: _ClassVar[int]
    EVICTIONS_FIELD_NUMBER: _ClassVar[int]
    EFFECTIVE_BANDS_FIELD_NUMBER: _ClassVar[int]
    BATCH_ENDS_FIELD_NUMBER: _ClassVar[int]
    BATCHED_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    assignments: _containers.RepeatedCompositeFieldContainer[SchedulingAssignment]
    timed_out: _containers.RepeatedCompositeFieldContainer[TimedOutTask]
    pending_reasons: _containers.ScalarMap[str, str]
    reservation_holds: _containers.RepeatedCompositeFieldContainer[ReservationHold]
    reservation_reasons: _containers.ScalarMap[str, str]
    evictions: _containers.RepeatedCompositeFieldContainer[SchedulingEviction]
    effective_bands: _containers.ScalarMap[str, str]
    batch_ends: _containers.RepeatedScalarFieldContainer[int]
    batched: bool
    queue: _containers.RepeatedCompositeFieldContainer[QueueEntry]
    def __init__(self, assignments: _Optional[_Iterable[_Union[SchedulingAssignment, _Mapping]]] = ..., timed_out: _Optional[_Iterable[_Union[TimedOutTask, _Mapping]]] = ..., pending_reasons: _Optional[_Mapping[str, str]] = ..., reservation_holds: _Optional[_Iterable[_Union[ReservationHold, _Mapping]]] = ..., reservation_reasons: _Optional[_Mapping[str, str]] = ..., evictions: _Optional[_Iterable[_Union[SchedulingEviction, _Mapping]]] = ..., effective_bands: _Optional[_Mapping[str, str]] = ..., batch_ends: _Optional[_Iterable[int]] = ..., batched: _Optional[bool] = ..., queue: _Optional[_Iterable[_Union[QueueEntry, _Mapping]]] = ...) -> None: ...

class WorkerList(_message.Message):
    __slots__ = ("workers", "next_after")
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    NEXT_AFTER_FIELD_NUMBER: _ClassVar[int]
    workers: _containers.RepeatedCompositeFieldContainer[WorkerStatus]
    next_after: str
    def __init__(self, workers: _Optional[_Iterable[_Union[WorkerStatus, _Mapping]]] = ..., next_after: _Optional[str] = ...) -> None: ...

class ClusterSummary(_message.Message):
    __slots__ = ("store_url", "healthy_workers", "total_workers", "pending_tasks", "running_tasks")
    STORE_URL_FIELD_NUMBER: _ClassVar[int]
    HEALTHY_WORKERS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_WORKERS_FIELD_NUMBER: _ClassVar[int]
    PENDING_TASKS_FIELD_NUMBER: _ClassVar[int]
    RUNNING_TASKS_FIELD_NUMBER: _ClassVar[int]
    store_url: str
    healthy_workers: int
    total_workers: int
    pending_tasks: int
    running_tasks: int
    def __init__(self, store_url: _Optional[str] = ..., healthy_workers: _Optional[int] = ..., total_workers: _Optional[int] = ..., pending_tasks: _Optional[int] = ..., running_tasks: _Optional[int] = ...) -> None: ...

class DashboardWorkersRequest(_message.Message):
    __slots__ = ("text", "state", "attribute", "offset", "limit")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    text: str
    state: str
    attribute: str
    offset: int
    limit: int
    def __init__(self, text: _Optional[str] = ..., state: _Optional[str] = ..., attribute: _Optional[str] = ..., offset: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class GroupCapacity(_message.Message):
    __slots__ = ("group", "used_cpu_millis", "cpu_millis")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    USED_CPU_MILLIS_FIELD_NUMBER: _ClassVar[int]
    CPU_MILLIS_FIELD_NUMBER: _ClassVar[int]
    group: str
    used_cpu_millis: int
    cpu_millis: int
    def __init__(self, group: _Optional[str] = ..., used_cpu_millis: _Optional[int] = ..., cpu_millis: _Optional[int] = ...) -> None: ...

class DashboardWorkers(_message.Message):
    __slots__ = ("summary", "matched", "offset", "workers", "running_counts", "healthy", "cordoned", "lost", "busy", "groups")
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    MATCHED_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    RUNNING_COUNTS_FIELD_NUMBER: _ClassVar[int]
    HEALTHY_FIELD_NUMBER: _ClassVar[int]
    CORDONED_FIELD_NUMBER: _ClassVar[int]
    LOST_FIELD_NUMBER: _ClassVar[int]
    BUSY_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    summary: ClusterSummary
    matched: int
    offset: int
    workers: _containers.RepeatedCompositeFieldContainer[WorkerStatus]
    running_counts: _containers.RepeatedScalarFieldContainer[int]
    healthy: int
    cordoned: int
    lost: int
    busy: int
    groups: _containers.RepeatedCompositeFieldContainer[GroupCapacity]
    def __init__(self, summary: _Optional[_Union[ClusterSummary, _Mapping]] = ..., matched: _Optional[int] = ..., offset: _Optional[int] = ..., workers: _Optional[_Iterable[_Union[WorkerStatus, _Mapping]]] = ..., running_counts: _Optional[_Iterable[int]] = ..., healthy: _Optional[int] = ..., cordoned: _Optional[int] = ..., lost: _Optional[int] = ..., busy: _Optional[int] = ..., groups: _Optional[_Iterable[_Union[GroupCapacity, _Mapping]]] = ...) -> None: ...

class DashboardQueue(_message.Message):
    __slots__ = ("summary", "snapshot")
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    summary: ClusterSummary
    snapshot: bytes
    def __init__(self, summary: _Optional[_Union[ClusterSummary, _Mapping]] = ..., snapshot: _Optional[bytes] = ...) -> None: ...

class WorkerRow(_message.Message):
    __slots__ = ("worker_id", "session", "cpu_millis", "memory_bytes", "gpus", "tpus", "attributes", "runtime", "state", "suspect_until", "dispatch_failures", "cordoned", "lost_at", "host", "address", "port_range_start", "port_range_end", "heartbeat_timeout_seconds")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: AttributeValue
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[AttributeValue, _Mapping]] = ...) -> None: ...
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    CPU_MILLIS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    TPUS_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SUSPECT_UNTIL_FIELD_NUMBER: _ClassVar[int]
    DISPATCH_FAILURES_FIELD_NUMBER: _ClassVar[int]
    CORDONED_FIELD_NUMBER: _ClassVar[int]
    LOST_AT_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PORT_RANGE_START_FIELD_NUMBER: _ClassVar[int]
    PORT_RANGE_END_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    session: str
    cpu_millis: int
    memory_bytes: int
    gpus: int
    tpus: int
    attributes: _containers.MessageMap[str, AttributeValue]
    runtime: str
    state: str
    suspect_until: float
    dispatch_failures: int
    cordoned: bool
    lost_at: float
    host: str
    address: str
    port_range_start: int
    port_range_end: int
    heartbeat_timeout_seconds: float
    def __init__(self, worker_id: _Optional[str] = ..., session: _Optional[str] = ..., cpu_millis: _Optional[int] = ..., memory_bytes: _Optional[int] = ..., gpus: _Optional[int] = ..., tpus: _Optional[int] = ..., attributes: _Optional[_Mapping[str, AttributeValue]] = ..., runtime: _Optional[str] = ..., state: _Optional[str] = ..., suspect_until: _Optional[float] = ..., dispatch_failures: _Optional[int] = ..., cordoned: _Optional[bool] = ..., lost_at: _Optional[float] = ..., host: _Optional[str] = ..., address: _Optional[str] = ..., port_range_start: _Optional[int] = ..., port_range_end: _Optional[int] = ..., heartbeat_timeout_seconds: _Optional[float] = ...) -> None: ...

class WorkerRows(_message.Message):
    __slots__ = ("workers",)
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    workers: _containers.RepeatedCompositeFieldContainer[WorkerRow]
    def __init__(self, workers: _Optional[_Iterable[_Union[WorkerRow, _Mapping]]] = ...) -> None: ...

class SerializedWorkerRows(_message.Message):
    __slots__ = ("workers",)
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    workers: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, workers: _Optional[_Iterable[bytes]] = ...) -> None: ...

class QueueRows(_message.Message):
    __slots__ = ("specs", "job_ids", "spec", "submitted_at", "room_at", "tasks", "task_indices", "attempts", "reason_job_ids", "reasons")
    SPECS_FIELD_NUMBER: _ClassVar[int]
    JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_AT_FIELD_NUMBER: _ClassVar[int]
    ROOM_AT_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    TASK_INDICES_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    REASON_JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    specs: _containers.RepeatedScalarFieldContainer[bytes]
    job_ids: _containers.RepeatedScalarFieldContainer[str]
    spec: _containers.RepeatedScalarFieldContainer[int]
    submitted_at: _containers.RepeatedScalarFieldContainer[float]
    room_at: _containers.RepeatedScalarFieldContainer[float]
    tasks: _containers.RepeatedScalarFieldContainer[int]
    task_indices: _containers.RepeatedScalarFieldContainer[int]
    attempts: _containers.RepeatedScalarFieldContainer[int]
    reason_job_ids: _containers.RepeatedScalarFieldContainer[str]
    reasons: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, specs: _Optional[_Iterable[bytes]] = ..., job_ids: _Optional[_Iterable[str]] = ..., spec: _Optional[_Iterable[int]] = ..., submitted_at: _Optional[_Iterable[float]] = ..., room_at: _Optional[_Iterable[float]] = ..., tasks: _Optional[_Iterable[int]] = ..., task_indices: _Optional[_Iterable[int]] = ..., attempts: _Optional[_Iterable[int]] = ..., reason_job_ids: _Optional[_Iterable[str]] = ..., reasons: _Optional[_Iterable[str]] = ...) -> None: ...

class PlacedRun(_message.Message):
    __slots__ = ("cpu_millis", "memory_bytes", "gpus", "tpus", "user", "band", "gang", "task_indices", "attempts", "workers", "placed_at")
    CPU_MILLIS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    TPUS_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    BAND_FIELD_NUMBER: _ClassVar[int]
    GANG_FIELD_NUMBER: _ClassVar[int]
    TASK_INDICES_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    PLACED_AT_FIELD_NUMBER: _ClassVar[int]
    cpu_millis: int
    memory_bytes: int
    gpus: int
    tpus: int
    user: str
    band: str
    gang: bool
    task_indices: _containers.RepeatedScalarFieldContainer[int]
    attempts: _containers.RepeatedScalarFieldContainer[int]
    workers: _containers.RepeatedScalarFieldContainer[int]
    placed_at: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, cpu_millis: _Optional[int] = ..., memory_bytes: _Optional[int] = ..., gpus: _Optional[int] = ..., tpus: _Optional[int] = ..., user: _Optional[str] = ..., band: _Optional[str] = ..., gang: _Optional[bool] = ..., task_indices: _Optional[_Iterable[int]] = ..., attempts: _Optional[_Iterable[int]] = ..., workers: _Optional[_Iterable[int]] = ..., placed_at: _Optional[_Iterable[float]] = ...) -> None: ...

class PlacedJob(_message.Message):
    __slots__ = ("runs",)
    RUNS_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[PlacedRun]
    def __init__(self, runs: _Optional[_Iterable[_Union[PlacedRun, _Mapping]]] = ...) -> None: ...

class HeldPorts(_message.Message):
    __slots__ = ("ports",)
    class PortsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    PORTS_FIELD_NUMBER: _ClassVar[int]
    ports: _containers.ScalarMap[str, int]
    def __init__(self, ports: _Optional[_Mapping[str, int]] = ...) -> None: ...

class PlacedState(_message.Message):
    __slots__ = ("jobs", "job_ids", "worker_names", "tasks", "used_workers", "used_cpu_millis", "used_memory_bytes", "used_gpus", "used_tpus", "used_tasks", "users", "user_tasks", "ports")
    class JobsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: PlacedJob
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[PlacedJob, _Mapping]] = ...) -> None: ...
    class PortsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: HeldPorts
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[HeldPorts, _Mapping]] = ...) -> None: ...
    JOBS_FIELD_NUMBER: _ClassVar[int]
    JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    WORKER_NAMES_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    USED_WORKERS_FIELD_NUMBER: _ClassVar[int]
    USED_CPU_MILLIS_FIELD_NUMBER: _ClassVar[int]
    USED_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    USED_GPUS_FIELD_NUMBER: _ClassVar[int]
    USED_TPUS_FIELD_NUMBER: _ClassVar[int]
    USED_TASKS_FIELD_NUMBER: _ClassVar[int]
    USERS_FIELD_NUMBER: _ClassVar[int]
    USER_TASKS_FIELD_NUMBER: _ClassVar[int]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.MessageMap[str, PlacedJob]
    job_ids: _containers.RepeatedScalarFieldContainer[str]
    worker_names: _containers.RepeatedScalarFieldContainer[str]
    tasks: int
    used_workers: _containers.RepeatedScalarFieldContainer[str]
    used_cpu_millis: _containers.RepeatedScalarFieldContainer[int]
    used_memory_bytes: _containers.RepeatedScalarFieldContainer[int]
    used_gpus: _containers.RepeatedScalarFieldContainer[int]
    used_tpus: _containers.RepeatedScalarFieldContainer[int]
    used_tasks: _containers.RepeatedScalarFieldContainer[int]
    users: _containers.RepeatedScalarFieldContainer[str]
    user_tasks: _containers.RepeatedScalarFieldContainer[int]
    ports: _containers.MessageMap[str, HeldPorts]
    def __init__(self, jobs: _Optional[_Mapping[str, PlacedJob]] = ..., job_ids: _Optional[_Iterable[str]] = ..., worker_names: _Optional[_Iterable[str]] = ..., tasks: _Optional[int] = ..., used_workers: _Optional[_Iterable[str]] = ..., used_cpu_millis: _Optional[_Iterable[int]] = ..., used_memory_bytes: _Optional[_Iterable[int]] = ..., used_gpus: _Optional[_Iterable[int]] = ..., used_tpus: _Optional[_Iterable[int]] = ..., used_tasks: _Optional[_Iterable[int]] = ..., users: _Optional[_Iterable[str]] = ..., user_tasks: _Optional[_Iterable[int]] = ..., ports: _Optional[_Mapping[str, HeldPorts]] = ...) -> None: ...
