"""The package version, on the bottom floor so that any module can name it without importing the facade."""

__version__ = "0.1.0"
