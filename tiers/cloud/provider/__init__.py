"""Hosted model providers as tiers (OpenAI's and Anthropic's protocols)."""
