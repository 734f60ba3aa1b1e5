"""Build steps behind ``tiergate models ...``: turning the project's converted models into other formats.

These run once per model version (from ``scripts/setup.sh`` or by hand), never while serving.
"""
