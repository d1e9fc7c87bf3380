"""The first task of the FAQ ("run this repo in a box, test the home page in a
browser, and hand it to me for review"), as an agent does it with the
official Python MCP SDK against psbx's /mcp, following docs/examples.md for
example 1 (examples/notes):

usage: first_task.py MCP_URL API_KEY REPO_URL PREPARE_CMD WAIT_S

sandbox_start with the web service on 8080; PREPARE_CMD through sandbox_exec
(what the test's box needs that a box with internet does not: the images);
git clone REPO_URL; docker compose up -d; waits for the page; sandbox_shot of
the box's own URL; sandbox_review with the URL, waiting WAIT_S for the answer.
Prints {box, url, shot, review, progress}: each tool result with its texts,
images (base64) and structured content. The checks are the Rust test's.
"""

import asyncio
import json
import sys

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from agent_calls import call, must

URL, KEY, REPO, PREPARE, WAIT_S = sys.argv[1:6]


async def first_task(c):
    seen = {}
    started = must(await call(c, "sandbox_start", {
        "name": "notes",
        "goal": "run the notes repo, test its home page, hand it over for review",
        "size": 2,
        "services": [{"name": "web", "port": 8080}],
    }), "sandbox_start")
    box, url = started["value"]["id"], started["value"]["url"]
    seen["box"], seen["url"] = box, url
    if PREPARE:
        must(await call(c, "sandbox_exec", {"id": box, "cmd": PREPARE, "wait_s": 600}), "preparing")
    must(await call(c, "sandbox_exec", {"id": box, "cmd": f"git clone -q {REPO} /work/notes"}), "git clone")
    must(await call(c, "sandbox_exec", {
        "id": box, "cmd": "cd /work/notes && docker compose up -d 2>&1", "wait_s": 600,
    }), "docker compose up")
    must(await call(c, "sandbox_exec", {
        "id": box,
        "cmd": "for i in $(seq 120); do curl -fsS http://localhost:8080/api/health && exit 0; sleep 1; done; "
               "docker compose -f /work/notes/compose.yaml logs 2>&1 | tail -40; exit 1",
    }), "waiting for the page")
    seen["shot"] = must(await call(c, "sandbox_shot", {"id": box, "url": url}), "sandbox_shot")
    progress = []
    seen["review"] = await call(c, "sandbox_review", {
        "id": box,
        "title": "Notes: the home page",
        "summary": "I cloned the notes repo, started it with docker compose and took a screenshot "
                   "of its home page. Please check that you can add a note.",
        "urls": [url],
        "wait_s": int(WAIT_S),
    }, progress)
    seen["progress"] = progress
    return seen


async def main():
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=httpx2.Timeout(60.0, read=900.0),
    )
    async with http:
        async with Client(streamable_http_client(URL, http_client=http), mode="2026-07-28") as c:
            seen = await first_task(c)
    print(json.dumps(seen))


asyncio.run(main())
