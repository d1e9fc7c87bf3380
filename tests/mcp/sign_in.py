"""Signs a person in on psbx's OAuth authorize page, as a browser would, for
an MCP client that is waiting for its callback: opens the authorization URL
the client asked the browser to open (argv[1]), posts the sign-in form with
the account's name and password (argv[2], argv[3]) and approval, then follows
the redirect to the client's loopback callback. Prints one JSON line:
{"callback": status of the callback page, "location": where psbx sent the
browser}. Standard library only, so it runs in a test's network namespace."""
import html, http.cookiejar, json, re, sys, urllib.error, urllib.parse, urllib.request

url, account, password = sys.argv[1], sys.argv[2], sys.argv[3]


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


jar = http.cookiejar.CookieJar()
opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar), NoRedirect)
page = opener.open(url, timeout=30).read().decode()
fields = [
    (html.unescape(n), html.unescape(v))
    for n, v in re.findall(r'<input type="hidden" name="([^"]*)" value="([^"]*)"', page)
]
fields += [("account", account), ("password", password), ("decision", "approve")]
parts = urllib.parse.urlsplit(url)
origin = "%s://%s" % (parts.scheme, parts.netloc)
form = urllib.request.Request(
    origin + "/oauth/authorize",
    data=urllib.parse.urlencode(fields).encode(),
    headers={"Origin": origin},
)
try:
    answer = opener.open(form, timeout=30)
    sys.exit("the sign-in form was answered %d, not a redirect: %s" % (answer.status, answer.read()[:500]))
except urllib.error.HTTPError as e:
    if e.code != 303:
        sys.exit("the sign-in form was answered %d: %s" % (e.code, e.read()[:500]))
    location = e.headers["Location"]
callback = urllib.request.urlopen(location, timeout=30)
print(json.dumps({"callback": callback.status, "location": location}))
