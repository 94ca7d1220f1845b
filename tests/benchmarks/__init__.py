"""Tests of the benchmarks package's own helpers (cpu.py, downstream.py, bench_e2e's
downstream_pid): the one place in tests/ that imports benchmarks/ (import-linter allows it nowhere
else)."""
