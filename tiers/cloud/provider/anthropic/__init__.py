"""Anthropic's Messages API: the one pair of translators between it and the neutral shapes tiers
speak, used by the provider tier's ``anthropic`` protocol and by the gateway's ``/v1/messages``."""

from tiers.cloud.provider.anthropic._answer import StreamError, StreamReader, events_of_message, usage_of
from tiers.cloud.provider.anthropic._dialect import ABSENT, VERSION, AnthropicDialect
from tiers.cloud.provider.anthropic._request import params_of, turns
from tiers.cloud.provider.anthropic._tables import (
    FINISH_REASONS,
    IMAGE_TYPES,
    STOP_REASONS,
    TOOL_CHOICES,
    anthropic_tool_choice,
    finish_reason,
    image_source,
    image_url,
    neutral_tool_choice,
    stop_reason,
    text_block,
    tool_input,
    tool_use_block,
    tool_use_id,
)

__all__ = [
    "ABSENT",
    "FINISH_REASONS",
    "IMAGE_TYPES",
    "STOP_REASONS",
    "TOOL_CHOICES",
    "VERSION",
    "AnthropicDialect",
    "StreamError",
    "StreamReader",
    "anthropic_tool_choice",
    "events_of_message",
    "finish_reason",
    "image_source",
    "image_url",
    "neutral_tool_choice",
    "params_of",
    "stop_reason",
    "text_block",
    "tool_input",
    "tool_use_block",
    "tool_use_id",
    "turns",
    "usage_of",
]
