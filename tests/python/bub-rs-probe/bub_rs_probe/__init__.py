"""bub-rs test plugin (see plugin.py)."""
