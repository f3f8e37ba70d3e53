"""The package version, in a leaf module so any module can read it without importing the
public API in core/__init__.py."""

__version__ = "0.1.0"
