"""Helpers that test modules and the benchmarks share, one module per kind. Fixtures stay in
conftest.py files; no module imports a test module or a conftest."""
