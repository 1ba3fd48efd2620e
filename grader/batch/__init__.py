"""Grading a class: the batch, its gradebook, trusted worker processes, the Dask backend."""
