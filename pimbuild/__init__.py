"""pimbuild: decide host vs processing-in-memory placement for the loop nests of a PyTorch model."""

__version__ = "0.1.0"
