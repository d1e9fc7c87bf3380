"""sandbox_exec's waiting, capping and time limits, driven by the official
Python MCP SDK (2026-07-28 revision) against psbx's /mcp.

usage: exec_client.py URL API_KEY SCENARIO   (SCENARIO: work or long)

work: a command outliving wait_s keeps running and is waited for again by pid;
      50 MB of output comes back capped; timeout_s kills a command; a background
      command's answer names its log; sandbox_status lists the commands.
long: a 10-minute command: the first call returns after wait_s with its pid,
      the second waits for its end while other calls are answered on the
      server's only HTTP worker; progress arrives all along; the exit code is
      read from the result and from sandbox_status.

Prints one JSON object with what it saw.
"""

import asyncio
import json
import sys
import time

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

URL, KEY, SCENARIO = sys.argv[1:4]


def client(http):
    return Client(streamable_http_client(URL, http_client=http), mode="2026-07-28")


def http_client():
    return httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=httpx2.Timeout(60.0, read=900.0),
    )


async def call(c, name, args, progress=None):
    async def on_progress(value, total, message):
        if progress is not None:
            progress.append({"at": time.monotonic(), "message": message})

    result = await c.call_tool(name, args, progress_callback=on_progress)
    return {
        "error": result.is_error,
        "text": "".join(getattr(x, "text", "") for x in result.content),
        "value": result.structured_content,
    }


async def work(c, box):
    seen = {}
    progress = []
    seen["waited"] = await call(
        c, "sandbox_exec",
        {"id": box, "cmd": "echo begun; sleep 12; echo finished; exit 3", "wait_s": 2},
        progress,
    )
    pid = (seen["waited"]["value"] or {}).get("pid")
    seen["again"] = await call(c, "sandbox_exec", {"id": box, "pid": pid, "wait_s": 60}, progress)
    seen["progress"] = [p["message"] for p in progress]
    seen["big"] = await call(
        c, "sandbox_exec",
        {"id": box, "cmd": "head -c 37500000 /dev/zero | base64 -w 100; echo the-end"},
    )
    big = seen["big"]["value"] or {}
    seen["big_text_len"] = len(seen["big"]["text"])
    seen["big_tail"] = (big.get("output") or {}).get("text", "")[-200:]
    # The whole output stays readable through the log file.
    seen["big_log_size"] = await call(
        c, "sandbox_exec", {"id": box, "cmd": f"wc -c < {big.get('log')}"}
    )
    for k in ("big",):
        if seen[k]["value"] and seen[k]["value"].get("output"):
            seen[k]["value"]["output"]["text"] = seen[k]["value"]["output"]["text"][:100]
        seen[k]["text"] = seen[k]["text"][:100]
    seen["killed"] = await call(c, "sandbox_exec", {"id": box, "cmd": "sleep 100", "timeout_s": 2})
    seen["background"] = await call(
        c, "sandbox_exec", {"id": box, "cmd": "echo in-the-background; sleep 100", "background": True}
    )
    seen["status"] = await call(c, "sandbox_status", {"id": box})
    seen["no_cmd"] = await call(c, "sandbox_exec", {"id": box})
    seen["unknown_pid"] = await call(c, "sandbox_exec", {"id": box, "pid": 999999})
    return seen


async def long(c, box):
    seen = {}
    progress = []
    cmd = "for i in $(seq 1 60); do echo tick $i; sleep 10; done; exit 7"
    seen["first"] = await call(c, "sandbox_exec", {"id": box, "cmd": cmd, "wait_s": 30}, progress)
    pid = (seen["first"]["value"] or {}).get("pid")
    seen["first_progress"] = len(progress)
    waiting = asyncio.create_task(
        call(c, "sandbox_exec", {"id": box, "pid": pid, "wait_s": 900}, progress)
    )
    # Meanwhile, other calls on another connection: each must be answered while
    # the long call is still waiting (the server runs one HTTP worker).
    answered = []
    async with http_client() as http2:
        async with client(http2) as other:
            for _ in range(5):
                await asyncio.sleep(60)
                listed = await call(other, "sandbox_list", {})
                answered.append({"error": listed["error"], "while_waiting": not waiting.done()})
    seen["answered_meanwhile"] = answered
    seen["second"] = await waiting
    seen["progress_count"] = len(progress)
    gaps = [b["at"] - a["at"] for a, b in zip(progress, progress[1:])]
    seen["largest_progress_gap_s"] = max(gaps) if gaps else None
    seen["last_progress"] = progress[-1]["message"] if progress else None
    seen["status"] = await call(c, "sandbox_status", {"id": box})
    for k in ("first", "second"):
        seen[k]["text"] = seen[k]["text"][:300]
    return seen


async def main():
    async with http_client() as http:
        async with client(http) as c:
            started = await call(c, "sandbox_start", {"name": "exec " + SCENARIO})
            box = (started["value"] or {}).get("id")
            try:
                seen = await (work(c, box) if SCENARIO == "work" else long(c, box))
            finally:
                if box:
                    seen_stop = await call(c, "sandbox_stop", {"id": box})
            seen["started"] = started
            seen["stopped"] = seen_stop
            print(json.dumps(seen))


asyncio.run(main())
