"""The semantic cache: a paraphrase of a stored request, in the same context, gets its answer."""

from gateway.pipeline.answers.semantic.cache import Asked, SemanticCache, semantic_cache

__all__ = ["Asked", "SemanticCache", "semantic_cache"]
