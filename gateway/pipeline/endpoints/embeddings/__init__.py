"""``POST /v1/embeddings``: the stages that serve it (``stages.py``, the chat pipeline's stages with
the same objects), in front of ``tiers.embedding``; OpenAI's request and answer are in
:mod:`gateway.wire.embeddings`."""
