"""Tests of the verl plugin (dsdr_train/integrations/verl). They import verl, so they run only in
the verl environment (`make setup` builds .venv-verl; `make test-verl` runs them); the main suite
(`pytest tests`) never collects this directory (pyproject testpaths)."""

from __future__ import annotations

import os
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore", message=".* engine is not available")
