"""The exit codes of every ``ticdc-sink`` command (README, "Exit codes")."""

# 2 is argparse's and the decoder's "bad input" (a bad argument or setting too); 1 is any other
# failure; a command stopped by a signal exits 128 + its number, as shells report it.
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2
EXIT_SIGNALLED = 128
