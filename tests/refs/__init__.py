"""The tests' independent float64 references (never the code under test)."""
