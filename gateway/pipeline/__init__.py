"""The chat pipeline: one request's stages, in order, listed in :mod:`gateway.pipeline.chat`
(authenticate, parse, media, limit, cache, plan, admit, dispatch, frame, record)."""
