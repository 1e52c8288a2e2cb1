"""The benchmark suite: standard workloads, results.json, tables."""
