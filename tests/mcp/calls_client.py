"""A real MCP client (the official Python SDK) making a list of tool calls.

usage: calls_client.py URL API_KEY CALLS_JSON

CALLS_JSON is a JSON list of [tool, arguments]. Prints one JSON list with, for
each call, {"tool", "is_error", "text", "structured"}.
"""

import asyncio
import json
import sys

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

URL, KEY, CALLS = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])


async def main():
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=httpx2.Timeout(60.0, read=300.0),
    )
    seen = []
    async with http:
        async with Client(streamable_http_client(URL, http_client=http)) as client:
            for tool, arguments in CALLS:
                result = await client.call_tool(tool, arguments)
                seen.append({
                    "tool": tool,
                    "is_error": result.is_error,
                    "text": "".join(getattr(c, "text", "") for c in result.content),
                    "structured": result.structured_content,
                })
    print(json.dumps(seen))


asyncio.run(main())
