"""The application shell: the ``ticdc-sink`` command and the local services it starts."""

__version__ = "0.1.0"
