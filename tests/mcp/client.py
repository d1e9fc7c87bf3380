"""A real MCP client (the official Python SDK, mcp 2.x) driving psbx's /mcp.

usage: client.py URL API_KEY MODE   (MODE: legacy = 2025-11-25, or 2026-07-28)

Lists the tools, starts a box, runs `uname -a` in it, reads an unknown box
(an isError result), stops the box, and prints one JSON object with what it saw.
"""

import asyncio
import json
import sys

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

URL, KEY, MODE = sys.argv[1:4]


def text_of(result):
    return "".join(getattr(c, "text", "") for c in result.content)


async def main():
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=httpx2.Timeout(60.0, read=600.0),
    )
    async with http:
        async with Client(streamable_http_client(URL, http_client=http), mode=MODE) as client:
            tools = await client.list_tools()
            schemas = {t.name: t.input_schema for t in tools.tools}
            started = await client.call_tool(
                "sandbox_start",
                {"name": "mcp " + MODE, "services": [{"name": "api.svc.local", "port": 8080}]},
            )
            box = started.structured_content
            progress = []

            async def on_progress(value, total, message):
                progress.append(message)

            ran = await client.call_tool(
                "sandbox_exec",
                {"id": box["id"], "cmd": "uname -a"},
                progress_callback=on_progress,
            )
            wired = await client.call_tool(
                "sandbox_wire",
                {"id": box["id"], "service": "web.svc.local", "port": 80, "targetPort": 3000},
            )
            external = await client.call_tool(
                "sandbox_wire", {"id": box["id"], "service": "api.svc.local", "mode": "external"}
            )
            environments = await client.call_tool("sandbox_environments", {})
            unknown = await client.call_tool("sandbox_status", {"id": "box_doesnotexist"})
            stopped = await client.call_tool("sandbox_stop", {"id": box["id"]})
            print(json.dumps({
                "tools": sorted(schemas),
                "schemas": schemas,
                "started": box,
                "started_error": started.is_error,
                "exec": ran.structured_content,
                "exec_text": text_of(ran),
                "wired": wired.structured_content,
                "wired_error": wired.is_error,
                "external_error": external.is_error,
                "external_text": text_of(external),
                "environments": environments.structured_content,
                "environments_text": text_of(environments),
                "unknown_error": unknown.is_error,
                "unknown_text": text_of(unknown),
                "stopped": stopped.structured_content,
            }))


asyncio.run(main())
