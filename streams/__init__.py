"""The Faust side: codecs, the normalized event model, Redis staging and watermarks."""
