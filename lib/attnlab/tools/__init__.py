"""Maintenance tools (not imported by the library): notebook execution."""
