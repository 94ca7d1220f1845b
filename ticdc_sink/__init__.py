"""The application shell: the ``ticdc-sink`` command and the local services it starts."""

from core.version import installed_version

__version__ = installed_version()
