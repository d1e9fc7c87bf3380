"""What the agent scripts (review_agent.py, first_task.py) share: a tool call
through the official MCP SDK's client, with its result as plain data, and the
check that a step worked."""


async def call(c, name, args, progress=None):
    """Calls tool `name`; {error, texts, images (base64 and mime), value}.
    Progress messages are appended to `progress` when given."""

    async def on_progress(value, total, message):
        if progress is not None:
            progress.append(message)

    result = await c.call_tool(name, args, progress_callback=on_progress)
    return {
        "error": result.is_error,
        "texts": [x.text for x in result.content if getattr(x, "type", "") == "text"],
        "images": [
            {"data": x.data, "mime": getattr(x, "mime_type", None) or getattr(x, "mimeType", None)}
            for x in result.content
            if getattr(x, "type", "") == "image"
        ],
        "value": result.structured_content,
    }


def must(result, what):
    """`result`, unless the call failed or the command it ran exited non-zero."""
    if result["error"]:
        raise SystemExit(f"{what} failed: {result['texts']}")
    value = result["value"] or {}
    if value.get("exitCode") not in (None, 0):
        raise SystemExit(f"{what} exited {value['exitCode']}: {value.get('output', {}).get('text')}")
    return result
