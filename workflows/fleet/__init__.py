"""The fleet's workflows: one per slice and per worker, and the autoscaler that grows and shrinks
the fleet in whole slices."""
