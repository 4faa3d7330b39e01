"""Example adapters, written as a user would: each is validated by the test suite."""
