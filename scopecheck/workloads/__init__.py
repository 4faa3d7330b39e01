"""Workload generators: the seeds' measurement workloads as harness transactions."""
