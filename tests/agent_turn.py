"""One turn of an openai-agents agent with one function tool, against a gateway: the shape both the Chat
Completions and the Responses API tests run (tests/integration/test_clients.py, test_responses.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai

from tests.conftest import Gateway


def weather_turn(gateway: Gateway, model_of: Callable[[openai.AsyncOpenAI], Any], max_tokens: int) -> Any:
    """Runs the agent on "the weather in Paris" with ``model_of(client)`` as its model (the SDK's
    Chat Completions or Responses model) and a required first tool call; returns the run's final
    output after checking the tool was called."""
    from agents import Agent, ModelSettings, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)  # nothing leaves the machine
    asked: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        asked.append(city)
        return "sunny, 21 degrees celsius"

    client = openai.AsyncOpenAI(
        base_url=f"{gateway.url}/v1",
        api_key=gateway.api_key,
        max_retries=0,
        default_headers={"Cache-Control": "no-cache"},
    )
    agent = Agent(
        name="weather",
        instructions="Answer the question about the weather using the get_weather tool.",
        tools=[get_weather],
        model=model_of(client),
        # the first turn must call the tool; after it the SDK resets the choice to auto
        model_settings=ModelSettings(tool_choice="required", temperature=0, max_tokens=max_tokens),
    )
    result = Runner.run_sync(agent, "What is the weather in Paris right now?", max_turns=4)
    assert asked, "the agent never called its tool"
    return result.final_output
