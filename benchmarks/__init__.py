"""Benchmarks of the workbook and the grader, each as a ratio against a floor measured in the same run.

Every ``benchmarks/<name>_bench.py`` module has a ``main() -> int``; ``python -m benchmarks`` runs them all.
"""
