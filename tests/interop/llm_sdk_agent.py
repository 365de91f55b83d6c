"""An agent as users run them: the official openai and anthropic SDKs,
pointed at abridge inside the sandbox by OPENAI_BASE_URL and
ANTHROPIC_BASE_URL with placeholder keys. Prints what each SDK saw, as
JSON, for the test to check."""
import json
import os
import sys

import anthropic
import openai

seen = {
    "env_keys": sorted(k for k in os.environ if k.endswith("_API_KEY")),
    "env_values_with_secret": [k for k, v in os.environ.items() if "host-secret" in v],
}

oa = openai.OpenAI(max_retries=0)
answer = oa.chat.completions.create(model="m1", messages=[{"role": "user", "content": "hi"}])
seen["openai_text"] = answer.choices[0].message.content

pieces = []
for chunk in oa.chat.completions.create(
    model="m1", messages=[{"role": "user", "content": "hi"}], stream=True
):
    if chunk.choices and chunk.choices[0].delta.content:
        pieces.append(chunk.choices[0].delta.content)
seen["openai_stream"] = pieces

try:
    oa.chat.completions.create(model="limited", messages=[])
    seen["openai_429"] = None
except openai.RateLimitError as e:
    seen["openai_429"] = [type(e).__name__, e.status_code, e.response.headers.get("retry-after")]

an = anthropic.Anthropic(max_retries=0)
weather = {
    "name": "weather",
    "description": "the weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
message = an.messages.create(
    model="m1",
    max_tokens=100,
    system="be brief",
    tools=[weather],
    messages=[{"role": "user", "content": "weather in Oslo?"}],
)
use = [b for b in message.content if b.type == "tool_use"][0]
seen["anthropic_tool"] = [message.stop_reason, use.name, use.input]

# The tool's result goes back as Anthropic tool_result blocks.
message = an.messages.create(
    model="m1",
    max_tokens=100,
    tools=[weather],
    messages=[
        {"role": "user", "content": "weather in Oslo?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": use.id, "name": use.name, "input": use.input}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "cold"}]},
    ],
)
seen["anthropic_after_tool"] = [message.stop_reason, message.content[0].text]

with an.messages.stream(
    model="m1", max_tokens=100, messages=[{"role": "user", "content": "hi"}]
) as stream:
    texts = list(stream.text_stream)
    final = stream.get_final_message()
seen["anthropic_stream"] = [texts, final.stop_reason, final.usage.output_tokens]

counted = an.messages.count_tokens(model="m1", messages=[{"role": "user", "content": "hi"}])
seen["anthropic_count"] = counted.input_tokens

try:
    an.messages.create(model="limited", max_tokens=10, messages=[{"role": "user", "content": "x"}])
    seen["anthropic_429"] = None
except anthropic.RateLimitError as e:
    seen["anthropic_429"] = [type(e).__name__, e.status_code]

json.dump(seen, sys.stdout)
