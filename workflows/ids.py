"""Names shared by the control plane, the worker agents and the client.

They are defined in the leaf contract module `activities.contracts` (which the worker agent imports
instead of workflow code) and re-exported here for the workflows.
"""

from __future__ import annotations

from activities.contracts import (
    AUTOSCALER_KIND as AUTOSCALER_KIND,
)
from activities.contracts import (
    AUTOSCALER_WORKFLOW_ID as AUTOSCALER_WORKFLOW_ID,
)
from activities.contracts import (
    CONTROL_TASK_QUEUE as CONTROL_TASK_QUEUE,
)
from activities.contracts import (
    HEALTHY_WORKER_QUERY as HEALTHY_WORKER_QUERY,
)
from activities.contracts import (
    JOB_KIND as JOB_KIND,
)
from activities.contracts import (
    JOB_NAME_ATTRIBUTE as JOB_NAME_ATTRIBUTE,
)
from activities.contracts import (
    JOB_STATE_ATTRIBUTE as JOB_STATE_ATTRIBUTE,
)
from activities.contracts import (
    JOB_TASKS_ATTRIBUTE as JOB_TASKS_ATTRIBUTE,
)
from activities.contracts import (
    JOB_USER_ATTRIBUTE as JOB_USER_ATTRIBUTE,
)
from activities.contracts import (
    KIND_ATTRIBUTE as KIND_ATTRIBUTE,
)
from activities.contracts import (
    KINDS as KINDS,
)
from activities.contracts import (
    SCHEDULER_KIND as SCHEDULER_KIND,
)
from activities.contracts import (
    SCHEDULER_WORKFLOW_ID as SCHEDULER_WORKFLOW_ID,
)
from activities.contracts import (
    SEARCH_ATTRIBUTES as SEARCH_ATTRIBUTES,
)
from activities.contracts import (
    SLICE_KIND as SLICE_KIND,
)
from activities.contracts import (
    SLICE_STATE_ATTRIBUTE as SLICE_STATE_ATTRIBUTE,
)
from activities.contracts import (
    TASK_KIND as TASK_KIND,
)
from activities.contracts import (
    WORKER_KIND as WORKER_KIND,
)
from activities.contracts import (
    task_workflow_id as task_workflow_id,
)
from activities.contracts import (
    worker_task_queue as worker_task_queue,
)
from activities.contracts import (
    worker_workflow_id as worker_workflow_id,
)
