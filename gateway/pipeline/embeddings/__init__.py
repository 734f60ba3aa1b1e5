"""``POST /v1/embeddings``: OpenAI's request and answer (``protocol.py``) and the stages that serve it
(``stages.py``, the chat pipeline's stages with the same objects), in front of ``tiers.embedding``."""
