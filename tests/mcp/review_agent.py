"""An agent's side of the review loop, driven by the official Python MCP SDK
against psbx's /mcp: screenshots and a recording of a page served in a box,
then the hand-over, waiting for the person's answer.

usage: review_agent.py URL API_KEY shots BOX_ID
       review_agent.py URL API_KEY review BOX_ID WAIT_S

shots:  in the running box BOX_ID (the production test's), serves a page
        (python3 -m http.server 3000), and takes with sandbox_shot: the page at
        1600x1000, the virtual display, and a 3-second recording of the page.
        Prints {box, page, display, recording}, each shot with its image
        contents (base64) and structured content.
review: sandbox_review {id, title, summary, urls: [the box's URL], wait_s};
        prints {review, texts, images, progress}.

The image checks (pixels, sizes) are the Rust test's: this script only
carries what the tools returned.
"""

import asyncio
import json
import sys

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from agent_calls import call, must

URL, KEY, MODE = sys.argv[1:4]

PAGE = """<!doctype html><html><head><style>
body { margin: 0; background: #fff; font-family: 'DejaVu Sans', sans-serif; }
#title { position: absolute; left: 100px; top: 100px; font-size: 48px; color: #000; }
#block { position: absolute; left: 800px; top: 600px; width: 200px; height: 100px; background: #f00; }
</style></head><body><div id="title">PSBX SHOT OK</div><div id="block"></div></body></html>
"""


def http_client():
    return httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=httpx2.Timeout(60.0, read=900.0),
    )


async def shots(c, box):
    seen = {"box": box}
    quoted = PAGE.replace("'", "'\\''")
    must(await call(c, "sandbox_exec", {
        "id": box,
        "cmd": f"mkdir -p /work/site && printf '%s' '{quoted}' > /work/site/index.html",
    }), "writing the page")
    must(await call(c, "sandbox_exec", {
        "id": box, "background": True,
        "cmd": "cd /work/site && exec python3 -m http.server 3000 --bind 127.0.0.1",
    }), "serving the page")
    must(await call(c, "sandbox_exec", {
        "id": box,
        "cmd": "for i in $(seq 60); do curl -sf http://127.0.0.1:3000/ >/dev/null && exit 0; sleep 1; done; exit 1",
    }), "waiting for the page")
    seen["page"] = await call(c, "sandbox_shot", {"id": box, "url": "http://localhost:3000/", "width": 1600, "height": 1000})
    seen["display"] = await call(c, "sandbox_shot", {"id": box})
    seen["recording"] = await call(c, "sandbox_shot", {
        "id": box, "url": "http://localhost:3000/", "kind": "recording", "seconds": 3,
        "width": 1280, "height": 800,
    })
    return seen


async def review(c, box, wait_s):
    status = must(await call(c, "sandbox_status", {"id": box}), "sandbox_status")
    progress = []
    answered = await call(c, "sandbox_review", {
        "id": box,
        "title": "The home page",
        "summary": "I served the page on port 3000.\nPlease check the title and the red block.",
        "urls": [status["value"]["url"]],
        "wait_s": wait_s,
    }, progress)
    answered["progress"] = progress
    answered["status_after"] = await call(c, "sandbox_status", {"id": box})
    return answered


async def main():
    async with http_client() as http:
        async with Client(streamable_http_client(URL, http_client=http), mode="2026-07-28") as c:
            if MODE == "shots":
                seen = await shots(c, sys.argv[4])
            elif MODE == "review":
                seen = await review(c, sys.argv[4], int(sys.argv[5]))
            else:
                raise SystemExit(f"unknown mode {MODE}")
    print(json.dumps(seen))


asyncio.run(main())
