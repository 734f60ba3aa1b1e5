"""The wire shapes of the OpenAI endpoints, at the bottom of ``gateway/``: typed msgspec structs for
what clients send and what tiergate answers, decoded strictly and bounded at decode time.

One module a shape: Chat Completions (:mod:`.chat`, its answers :mod:`.chat_response`, the JSON
schemas a client sends :mod:`.schemas`), the Responses API (:mod:`.responses`), the legacy completions
(:mod:`.completions`), embeddings (:mod:`.embeddings`), and Anthropic's Messages API (:mod:`.messages`).
A large body is scanned against the bounds its type declares before it is decoded (:mod:`.bounds`, the
places read from the types by :mod:`.places`), so that refusing it costs what the bound allows, not what
the body holds.  The HTTP face (``api/``), the pipeline and the media stand on them; they import nothing
of ``gateway/`` above ``gateway.errors``, only the engine-neutral types of ``tiers``.
"""
