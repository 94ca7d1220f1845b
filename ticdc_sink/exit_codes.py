"""The exit codes of every ``ticdc-sink`` command (README, "Exit codes")."""

from config.signals import EXIT_STOP_OVERDUE

# 2 is argparse's and the decoder's "bad input" (a bad argument or setting too); 1 is any other
# failure; 3 a worker or sink that outlived TICDC_SINK_STOP_TIMEOUT after a stop signal and
# ended itself; a command stopped by a signal exits 128 + its number, as shells report it.
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2
EXIT_SIGNALLED = 128

__all__ = ["EXIT_BAD_INPUT", "EXIT_FAILURE", "EXIT_SIGNALLED", "EXIT_STOP_OVERDUE"]
