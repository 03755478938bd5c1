"""The task workflow: one task's attempts on workers, with its retries and lease fencing; and the
short workflow a client's `iris task exec` starts."""
