"""Benchmarks: A vs B interleaved in one process, results in ``benchmarks/results/``.
Run ``python -m benchmarks.NAME``."""
