"""The job workflow: one run per job, a child task workflow per task; its table, waves, tree and
reservation. `job_workflow` is the shell."""
