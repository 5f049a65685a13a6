"""Requests to any OpenAI-compatible endpoint: ``client`` (batching, budgets, errors) on ``sdk`` (the
``openai`` SDK's retry loop, hooked), used by the ``openai`` backend and the LLM judge."""
