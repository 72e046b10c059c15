"""Test support: stand-in servers and scripted samplers for tests and benchmarks, never shipped in the wheel."""
