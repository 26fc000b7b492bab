"""The pure-Python golden model and the simulation runner."""
