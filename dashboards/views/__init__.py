"""One module per dashboard page; each exposes ``render(root, runs, requested)``."""
