"""What the client reads back from the cluster for people to look at: the fleet and its slices, the autoscaler's
status, teams and the queue, users' balances, running tasks' use so far (each a read of what a workflow publishes)."""
