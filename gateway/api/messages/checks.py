"""The values of a Messages request that the inventory (gateway/wire/anthropic/fields.py) takes in part:
a field decoded but refused for some of its values, with Anthropic's message for a model that lacks
what the value asks for.  Run before translation, so a request is refused before any of it is used."""

from __future__ import annotations

import msgspec

from gateway.errors import InvalidRequest, PermissionDenied
from gateway.wire import messages as am
from gateway.wire.anthropic import fields as inventory

WORKSPACE_HEADER = "anthropic-workspace-id"
PROFILE_HEADER = "anthropic-user-profile-id"


def _refused(where: str, message: str) -> InvalidRequest:
    return InvalidRequest(f"{where}: {message}", param=where, code="unsupported_value")


def check_request(request: am.CreateMessage | am.CountTokens, tenant: str, workspace: str | None) -> None:
    """Raise Anthropic's error for the first value here that no tier can honour."""
    model = request.model[:256]
    if workspace is not None and workspace != tenant:
        raise PermissionDenied(
            f"{WORKSPACE_HEADER}: this API key does not belong to workspace '{workspace[:128]}' "
            "(a key here belongs to one tenant: send its name, or leave the header out)"
        )
    if request.thinking is not None and request.thinking.type != "disabled":
        message = inventory.THINKING[request.thinking.type]
        raise InvalidRequest(message, param="thinking.type", code="unsupported_value")
    if request.speed == "fast":
        raise _refused("speed", f"fast mode is not supported on this model ('{model}').")
    if isinstance(request, am.CreateMessage):
        if isinstance(request.container, msgspec.Raw) and bytes(request.container) != b"null":
            raise _refused("container", inventory.refusal(inventory.REQUEST["container"], model))
        if request.inference_geo not in (None, "global"):
            raise _refused(
                "inference_geo",
                f"'{request.inference_geo[:64]}' is not available here; send 'global' or leave it out.",
            )
    for i, tool in enumerate(request.tools or ()):
        _check_tool(tool, f"tools.{i}", model)
    for i, turn in enumerate(request.messages):
        if isinstance(turn.content, list):
            for j, block in enumerate(turn.content):
                _check_block(block, f"messages.{i}.content.{j}", model)


def _check_tool(tool: am.Tool, where: str, model: str) -> None:
    if tool.type not in (None, "custom"):
        tag = tool.type
        raise InvalidRequest(
            f"'{model}' does not support tool types: {tag}.", param=f"{where}.type", code="unsupported_value"
        )
    where = f"{where}.custom"
    if tool.allowed_callers is not None and set(tool.allowed_callers) - {"direct"}:
        raise _refused(
            f"{where}.allowed_callers", f"code execution is not supported on this model ('{model}')."
        )
    if tool.defer_loading:
        raise _refused(f"{where}.defer_loading", f"tool search is not supported on this model ('{model}').")


def _check_block(block: am.Block, where: str, model: str) -> None:
    if isinstance(block, am.ToolUseBlock | am.ToolResultBlock) and block.toolset_name is not None:
        kind = "tool_use" if isinstance(block, am.ToolUseBlock) else "tool_result"
        raise _refused(
            f"{where}.{kind}.toolset_name", f"toolsets are not supported on this model ('{model}')."
        )
    images = [block] if isinstance(block, am.ImageBlock) else []
    if isinstance(block, am.ToolResultBlock) and isinstance(block.content, list):
        images = [b for b in block.content if isinstance(b, am.ImageBlock)]
    for image in images:
        if image.transformations is not None and image.transformations.oversized_image == "error":
            raise _refused(
                f"{where}.image.transformations.oversized_image",
                "'error' is not supported here: an image larger than the tier takes is scaled down "
                "(send 'downsize').",
            )
