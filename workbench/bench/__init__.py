"""Benchmarks: commands that measure and print tables (never timed tests). ``python -m workbench.bench --help``."""
