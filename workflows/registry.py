"""Every workflow type a controller serves.

Kept out of `workflows/__init__.py` on purpose: the sandbox imports a workflow's
package afresh for every workflow run, so a package that imported all six
workflow modules made each one-task job re-import the scheduler and the
autoscaler twice (measured: a third of the controller's CPU under load).
"""

from workflows.auth_workflow import AuthWorkflow
from workflows.autoscaler_workflow import AutoscalerWorkflow
from workflows.job_workflow import JobWorkflow
from workflows.scheduler_workflow import SchedulerWorkflow
from workflows.slice_workflow import SliceWorkflow
from workflows.task_access_workflow import TaskAccessWorkflow
from workflows.task_workflow import TaskWorkflow
from workflows.worker_workflow import WorkerWorkflow

ALL_WORKFLOWS = [JobWorkflow, TaskWorkflow, SchedulerWorkflow, WorkerWorkflow, SliceWorkflow, AutoscalerWorkflow,
                 TaskAccessWorkflow, AuthWorkflow]
