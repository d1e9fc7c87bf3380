"""An MCP client signing in to psbx with OAuth, as Claude Code or Codex would:
the official Python SDK's OAuthClientProvider (mcp 2.x) does discovery from the
401, dynamic client registration, PKCE and the token exchange; the "browser" is
an httpx client that opens the authorize page, fills in the sign-in form, and
reads the redirect.

usage: oauth_client.py MCP_URL password ACCOUNT PASSWORD
       oauth_client.py MCP_URL link LOGIN_LINK_URL

`password` signs in with the account's password; `link` opens the authorize
page, then the one-time sign-in link (which must lead back to the page), and
approves without a password. Then: list the tools, call sandbox_list, force a
refresh, call it again. Prints one JSON object with what it saw (tokens
included: the test checks their reuse and revocation).
"""

import asyncio
import html
import json
import re
import sys
from urllib.parse import parse_qs, urljoin, urlparse

import httpx2
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata

URL, MODE = sys.argv[1], sys.argv[2]
REDIRECT = "http://127.0.0.1:9/callback"  # never contacted: the redirect is read, not followed
seen = {"mode": MODE, "requests": []}


class Memory:
    def __init__(self):
        self.tokens = None
        self.client = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client

    async def set_client_info(self, info):
        self.client = info


def form_fields(page):
    fields = {}
    for name, value in re.findall(r'<input type="hidden" name="([^"]*)" value="([^"]*)">', page):
        fields[html.unescape(name)] = html.unescape(value)
    return fields


def origin_of(url):
    """The Origin header a browser sends with a form posted from a page at `url`."""
    parts = urlparse(url)
    return {"origin": f"{parts.scheme}://{parts.netloc}"}


browser = httpx2.AsyncClient(follow_redirects=False, timeout=30.0)
result = {}


async def open_in_browser(authorization_url):
    seen["authorization_url"] = authorization_url
    page = await browser.get(authorization_url)
    assert page.status_code == 200, (page.status_code, page.text)
    seen["page_asks_password"] = 'name="password"' in page.text
    if MODE == "link":
        # The link shows a confirmation page (a GET does not spend it); its
        # button posts it back, which signs the browser in.
        link = await browser.get(sys.argv[3])
        assert link.status_code == 200, (link.status_code, link.text)
        link = await browser.post(sys.argv[3], data=form_fields(link.text), headers=origin_of(sys.argv[3]))
        assert link.status_code == 303, (link.status_code, link.text)
        back = urljoin(authorization_url, link.headers["location"])
        seen["link_returns_to_page"] = back == authorization_url
        page = await browser.get(back)
        assert page.status_code == 200, (page.status_code, page.text)
        seen["signed_in_page"] = "Signed in as" in page.text and 'name="password"' not in page.text
        form = form_fields(page.text)
    else:
        form = form_fields(page.text)
        form["account"] = sys.argv[3]
        form["password"] = sys.argv[4]
    form["decision"] = "approve"
    answer = await browser.post(
        urljoin(authorization_url, "/oauth/authorize"), data=form, headers=origin_of(authorization_url)
    )
    assert answer.status_code == 303, (answer.status_code, answer.text)
    location = answer.headers["location"]
    query = parse_qs(urlparse(location).query)
    seen["redirected_to"] = location.split("?")[0]
    seen["iss"] = query["iss"][0]
    result["code"] = query["code"][0]
    result["state"] = query.get("state", [None])[0]
    result["iss"] = query["iss"][0]


async def callback():
    return AuthorizationCodeResult(code=result["code"], state=result["state"], iss=result["iss"])


async def log_request(request):
    seen["requests"].append(f"{request.method} {request.url.path}")


async def main():
    storage = Memory()
    provider = OAuthClientProvider(
        server_url=URL,
        client_metadata=OAuthClientMetadata(
            client_name="psbx OAuth test",
            redirect_uris=[REDIRECT],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        storage=storage,
        redirect_handler=open_in_browser,
        callback_handler=callback,
    )
    http = httpx2.AsyncClient(
        auth=provider,
        timeout=httpx2.Timeout(60.0, read=120.0),
        event_hooks={"request": [log_request]},
    )
    async with browser, http:
        async with Client(streamable_http_client(URL, http_client=http)) as client:
            tools = await client.list_tools()
            listed = await client.call_tool("sandbox_list", {})
            seen["tools"] = sorted(t.name for t in tools.tools)
            seen["list"] = listed.structured_content
            seen["list_error"] = listed.is_error
            seen["client_id"] = storage.client.client_id
            seen["first_access_token"] = storage.tokens.access_token
            seen["first_refresh_token"] = storage.tokens.refresh_token
            seen["expires_in"] = storage.tokens.expires_in
            # Pretend the access token expired: the provider refreshes it.
            provider.context.token_expiry_time = 1  # (0 would mean "no expiry")
            again = await client.call_tool("sandbox_list", {})
            seen["list_after_refresh_error"] = again.is_error
            seen["access_token"] = storage.tokens.access_token
            seen["refresh_token"] = storage.tokens.refresh_token
    print(json.dumps(seen))


asyncio.run(main())
