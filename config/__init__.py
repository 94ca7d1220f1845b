"""Settings and the error hierarchy: the bottom layer every other package imports."""

from config.errors import ConfigError, TicdcSinkError
from config.settings import Protocol, Settings, load_settings

__all__ = ["ConfigError", "Protocol", "Settings", "TicdcSinkError", "load_settings"]
