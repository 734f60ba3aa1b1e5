"""The chat pipeline: one request's stages from cache lookup to the tier's answer, and what wraps them."""
