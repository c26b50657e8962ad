"""Maintenance tools (not imported by the library): notebook execution, the recorded request batches."""
