"""Benchmark of proletarian-di against a plain driver loop: `python -m bench`."""
