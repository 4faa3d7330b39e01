"""scopecheck: the product surface — stateful machines, mutant catalogue, CLI, benchmarks."""

__version__ = "0.1.0"
