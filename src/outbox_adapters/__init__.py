"""leased-outbox adapters: everything that touches the world."""

__all__ = ["__version__"]

#: The package's version: the one source (pyproject.toml reads it through hatch).
__version__ = "0.1.0.dev0"
