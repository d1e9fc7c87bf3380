"""A real MCP client (the official Python SDK, mcp 2.x) driving `psbx mcp` over
stdio, and the remote /mcp's sandbox_sync upload URL, on one real box.

usage: stdio_client.py PSBX_BINARY SERVER_URL API_KEY REPO_DIR

Through `psbx mcp` (launched by the SDK's stdio_client with PSBX_URL and
PSBX_API_KEY): lists the tools, starts a box, syncs REPO_DIR into /work/repo,
reads it back with sandbox_exec (recording progress notifications), tries
a sync from outside any repository and an unknown box. Through the remote
/mcp: asks sandbox_sync for an upload URL, runs the returned command with
`sh -c` in REPO_DIR, reads the files back, uploads to the same URL again and
to an unknown token. Stops the box. Prints one JSON object with what it saw.
"""

import asyncio
import json
import subprocess
import sys
import tempfile

import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

PSBX, URL, KEY, REPO = sys.argv[1:5]


def text_of(result):
    return "".join(getattr(c, "text", "") for c in result.content)


async def via_stdio(seen):
    params = StdioServerParameters(
        command=PSBX,
        args=["mcp"],
        env={"PSBX_URL": URL, "PSBX_API_KEY": KEY, "RUST_LOG": "info,psbx_server=debug"},
        cwd=REPO,
    )
    async with Client(stdio_client(params)) as client:
        tools = await client.list_tools()
        seen["tools"] = sorted(t.name for t in tools.tools)
        seen["sync_schema"] = next(t.input_schema for t in tools.tools if t.name == "sandbox_sync")
        started = await client.call_tool("sandbox_start", {"name": "stdio"})
        seen["started"] = started.structured_content
        seen["started_error"] = started.is_error
        box = started.structured_content["id"]
        # No path: the directory psbx mcp runs in (REPO).
        synced = await client.call_tool("sandbox_sync", {"id": box, "dest": "repo"})
        seen["synced"] = synced.structured_content
        seen["synced_text"] = text_of(synced)
        seen["synced_error"] = synced.is_error
        progress = []

        async def on_progress(value, total, message):
            progress.append(message)

        ran = await client.call_tool(
            "sandbox_exec",
            {"id": box, "cmd": "cd /work/repo && ls -A && cat tracked.txt untracked.txt"},
            progress_callback=on_progress,
        )
        seen["exec"] = ran.structured_content
        seen["progress"] = progress
        with tempfile.TemporaryDirectory() as empty:
            outside = await client.call_tool("sandbox_sync", {"id": box, "path": empty})
        seen["outside_error"] = outside.is_error
        seen["outside_text"] = text_of(outside)
        unknown = await client.call_tool("sandbox_status", {"id": "box_doesnotexist"})
        seen["unknown_error"] = unknown.is_error
        seen["unknown_text"] = text_of(unknown)
        return box


async def via_remote(seen, box):
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=httpx2.Timeout(60.0, read=600.0),
    )
    async with http:
        async with Client(streamable_http_client(URL + "/mcp", http_client=http)) as client:
            tools = await client.list_tools()
            seen["remote_sync_schema"] = next(
                t.input_schema for t in tools.tools if t.name == "sandbox_sync"
            )
            asked = await client.call_tool("sandbox_sync", {"id": box, "dest": "remote"})
            seen["upload"] = asked.structured_content
            seen["upload_text"] = text_of(asked)
            seen["upload_error"] = asked.is_error
            run = subprocess.run(
                ["sh", "-c", asked.structured_content["command"]],
                cwd=REPO, capture_output=True, text=True, timeout=300,
            )
            seen["command_status"] = run.returncode
            seen["command_stdout"] = run.stdout
            seen["command_stderr"] = run.stderr
            remote_progress = []

            async def on_progress(value, total, message):
                remote_progress.append(message)

            ran = await client.call_tool(
                "sandbox_exec",
                {"id": box, "cmd": "cd /work/remote && ls -A && cat tracked.txt untracked.txt"},
                progress_callback=on_progress,
            )
            seen["remote_progress"] = remote_progress
            seen["remote_exec"] = ran.structured_content
            url = asked.structured_content["uploadUrl"]
            async with httpx2.AsyncClient(timeout=60.0) as plain:
                again = await plain.put(url, content=b"\0" * 1024)
                seen["again_status"] = again.status_code
                seen["again_body"] = again.json()
                base = url.rsplit("/", 1)[0]
                unknown = await plain.post(base + "/psbxup_nosuchtoken", content=b"\0" * 1024)
                seen["unknown_upload_status"] = unknown.status_code
                seen["unknown_upload_body"] = unknown.json()
            stopped = await client.call_tool("sandbox_stop", {"id": box})
            seen["stopped"] = stopped.structured_content


async def main():
    seen = {}
    box = await via_stdio(seen)
    await via_remote(seen, box)
    print(json.dumps(seen))


asyncio.run(main())
