"""Every workflow type a controller serves.

Kept out of `workflows/__init__.py` on purpose: the sandbox imports a workflow's
package afresh for every workflow run, so a package that imported all six
workflow modules made each one-task job re-import the scheduler and the
autoscaler twice (measured: a third of the controller's CPU under load).
"""

from workflows.auth.auth_workflow import AuthWorkflow
from workflows.fleet.autoscaler_workflow import AutoscalerWorkflow
from workflows.fleet.registrar_workflow import RegistrarWorkflow
from workflows.fleet.slice_workflow import SliceWorkflow
from workflows.fleet.worker_workflow import WorkerWorkflow
from workflows.jobs.job_workflow import JobWorkflow
from workflows.scheduler.scheduler_workflow import SchedulerWorkflow
from workflows.tasks.task_access_workflow import TaskAccessWorkflow
from workflows.tasks.task_workflow import TaskWorkflow

ALL_WORKFLOWS = [JobWorkflow, TaskWorkflow, SchedulerWorkflow, WorkerWorkflow, SliceWorkflow, AutoscalerWorkflow,
                 TaskAccessWorkflow, AuthWorkflow, RegistrarWorkflow]
