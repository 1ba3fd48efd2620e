"""jaxgrade: grade JAX notebook assignments with student code kept out of the grading process."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
