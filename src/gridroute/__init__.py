"""gridroute: route OpenAI-compatible inference traffic across sites by real capacity."""

__version__ = "0.1.0"
