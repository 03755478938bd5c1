"""The auth workflow: the cluster's users, tokens and roles (team mode)."""
