"""Runs moto's server with an STS AssumeRoleWithWebIdentity that checks its token.

  moto_sts.py HOST PORT
      the same server as `moto_server -H HOST -p PORT` (same Flask app, all
      services, /moto-api/reset-auth etc.), but moto's own
      AssumeRoleWithWebIdentity trusts every token, so it is replaced by one
      that checks it the way AWS STS does for an IAM OIDC identity provider,
      in this order (errors are STS XML ErrorResponses with AWS's codes):
      1. a compact JWS, alg ES256 or RS256, with a `kid`, else 400
         InvalidIdentityToken;
      2. its `iss` (http allowed) names an OIDC provider in IAM of the
         RoleArn's account (moto stores its URL without the scheme), else 400
         InvalidIdentityToken;
      3. `<iss>/.well-known/openid-configuration` -> `jwks_uri` -> the key with
         the token's `kid` verifies the signature: a fetch that fails is 400
         IDPCommunicationError, an unknown kid or bad signature 400
         InvalidIdentityToken;
      4. `exp` passed: 400 ExpiredTokenException; `nbf`/`iat` over 5 minutes
         ahead, or an `aud` not in the provider's client ids: 400
         InvalidIdentityToken;
      5. the role exists and its trust policy has an Allow statement for
         sts:AssumeRoleWithWebIdentity (wildcards too), Principal Federated
         the provider's ARN, whose conditions (StringEquals / StringLike on
         `<iss without scheme>:sub` / `:aud`) hold; an explicit Deny wins;
         else 403 AccessDenied;
      6. then moto's own AssumeRoleWithWebIdentity issues the credentials.
      DurationSeconds is passed through as asked: moto has no 900 s minimum, so
      a short one (e.g. 60) gives credentials that expire that soon.
      Like real STS, the call need not be signed: it alone is exempt from
      moto's IAM checks when they are on; every other call is checked as before.
      And an AssumeRole of a role in another account than the caller's is
      checked against that role's trust policy too (moto looks for the role
      in the caller's account only, and then checks no trust at all): psbx's
      identity and its customers' roles live in different accounts.
"""

import base64
import json
import os
import re
import sys
import time
import urllib.parse
import urllib.request

# moto.py beside this file would shadow the moto package.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]

from cryptography.exceptions import InvalidSignature  # noqa: E402
from cryptography.hazmat.primitives import hashes  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa  # noqa: E402
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature  # noqa: E402
from moto import server  # noqa: E402
from moto.iam.models import iam_backends  # noqa: E402
from moto.sts.responses import TokenResponse  # noqa: E402
from moto.iam.access_control import IAMRequestBase  # noqa: E402
from moto.iam.utils import REQUIRE_RESOURCE_ACCESS_POLICIES_CHECK  # noqa: E402
from moto.utilities.utils import get_partition  # noqa: E402

ACTION = "AssumeRoleWithWebIdentity"
SKEW = 300
ERROR = (
    '<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type>'
    "<Code>{}</Code><Message>{}</Message></Error><RequestId>{}</RequestId></ErrorResponse>"
)
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the issuer, not a proxy


class Refused(Exception):
    def __init__(self, code, message, status=400):
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


def b64(part):
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def bare(url):
    """A URL as IAM keeps an OIDC provider's: no scheme, no trailing '/'."""
    return re.sub(r"^[a-z]+://", "", url, flags=re.I).rstrip("/")


def fetch(url):
    with DIRECT.open(url, timeout=5) as answer:
        return json.loads(answer.read())


def public_key(jwk):
    num = lambda k: int.from_bytes(b64(jwk[k]), "big")  # noqa: E731
    if jwk.get("kty") == "EC" and jwk.get("crv") == "P-256":
        return ec.EllipticCurvePublicNumbers(num("x"), num("y"), ec.SECP256R1()).public_key()
    if jwk.get("kty") == "RSA":
        return rsa.RSAPublicNumbers(num("e"), num("n")).public_key()
    raise ValueError("unsupported key")


def verify(token, iss, alg, kid, signed, signature):
    try:
        config = fetch(iss.rstrip("/") + "/.well-known/openid-configuration")
        keys = fetch(config["jwks_uri"])["keys"]
    except Exception:
        raise Refused(
            "IDPCommunicationError",
            "Couldn't retrieve verification key from your identity provider, "
            "please reference AssumeRoleWithWebIdentity documentation for requirements",
        )
    bad = Refused("InvalidIdentityToken", "Couldn't verify the token's signature with your identity provider's keys")
    jwk = next((k for k in keys if isinstance(k, dict) and k.get("kid") == kid), {})
    try:
        key = public_key(jwk)
        if alg == "ES256" and isinstance(key, ec.EllipticCurvePublicKey) and len(signature) == 64:
            der = encode_dss_signature(int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big"))
            key.verify(der, signed, ec.ECDSA(hashes.SHA256()))
        elif alg == "RS256" and isinstance(key, rsa.RSAPublicKey):
            key.verify(signature, signed, padding.PKCS1v15(), hashes.SHA256())
        else:
            raise bad
    except (AttributeError, TypeError, KeyError, ValueError, InvalidSignature):
        raise bad


def like(pattern, value):
    return re.fullmatch(re.escape(pattern).replace(r"\*", ".*").replace(r"\?", "."), value) is not None


def matches(statement, provider_arn, context):
    listed = lambda v: v if isinstance(v, list) else [v]  # noqa: E731
    if not any(like(a.lower(), "sts:" + ACTION.lower()) for a in listed(statement.get("Action", []))):
        return False
    principal = statement.get("Principal")
    if not isinstance(principal, dict) or provider_arn not in listed(principal.get("Federated", [])):
        return False
    for operator, tests in (statement.get("Condition") or {}).items():
        test = {"StringEquals": lambda p, v: p == v, "StringLike": like}.get(operator)
        if test is None:
            return False
        for key, wanted in tests.items():
            have = context.get(key.lower())
            if have is None or not any(test(str(w), have) for w in listed(wanted)):
                return False
    return True


def check(self, role_arn, token):
    invalid = Refused(
        "InvalidIdentityToken",
        "The ID Token provided is not a valid JWT. (You may see this error if you sent an Access Token)",
    )
    try:
        head64, body64, sig64 = token.split(".")
        header, claims, signature = json.loads(b64(head64)), json.loads(b64(body64)), b64(sig64)
        alg, kid, iss = header["alg"], header["kid"], claims["iss"]
        shaped = alg in ("ES256", "RS256") and isinstance(kid, str) and isinstance(iss, str)
        shaped = shaped and isinstance(claims["exp"], (int, float))
    except Exception:
        shaped = False
    if not shaped:
        raise invalid
    found = re.match(r"arn:[^:]+:iam::(\d{12}):role/", role_arn or "")
    iam = iam_backends[found.group(1) if found else self.current_account][self.partition]
    provider = next((p for p in iam.open_id_providers.values() if bare(p.url) == bare(iss)), None)
    if provider is None:
        raise Refused("InvalidIdentityToken", f"No OpenIDConnect provider found in your account for {iss}")
    verify(token, iss, alg, kid, f"{head64}.{body64}".encode(), signature)
    now = time.time()
    if claims["exp"] <= now:
        stamp = lambda t: time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime(t))  # noqa: E731
        raise Refused(
            "ExpiredTokenException",
            f"Token expired: current date/time {stamp(now)} "
            f"must be before the expiration date/time {stamp(claims['exp'])}",
        )
    for claim in ("nbf", "iat"):
        if isinstance(claims.get(claim), (int, float)) and claims[claim] > now + SKEW:
            raise Refused("InvalidIdentityToken", f"Token not yet valid: its {claim} is in the future")
    auds = claims.get("aud") if isinstance(claims.get("aud"), list) else [claims.get("aud")]
    aud = next((a for a in auds if a in provider.client_id_list), None)
    if aud is None:
        raise Refused("InvalidIdentityToken", "Incorrect token audience")
    denied = Refused("AccessDenied", f"Not authorized to perform sts:{ACTION}", 403)
    try:
        document = iam.get_role_by_arn(role_arn).assume_role_policy_document
        if not document.lstrip().startswith("{"):
            document = urllib.parse.unquote(document)  # stored URL-encoded
        policy = json.loads(document)
    except Exception:
        raise denied
    prefix = bare(provider.url).lower()
    context = {prefix + ":sub": str(claims.get("sub", "")), prefix + ":aud": aud}
    statements = policy.get("Statement", [])
    statements = [s for s in (statements if isinstance(statements, list) else [statements]) if isinstance(s, dict)]
    hits = [s.get("Effect") for s in statements if matches(s, provider.arn, context)]
    if "Deny" in hits or "Allow" not in hits:
        raise denied


moto_assume = TokenResponse.assume_role_with_web_identity
moto_auth = TokenResponse._authenticate_and_authorize_normal_action


def assume_role_with_web_identity(self):
    try:
        check(self, self._get_param("RoleArn"), self._get_param("WebIdentityToken") or "")
    except Refused as no:
        body = ERROR.format(no.code, no.message.replace("&", "&amp;").replace("<", "&lt;"), "0")
        return no.status, {"status": no.status, "Content-Type": "text/xml"}, body
    return moto_assume(self)


def authenticate(self, resource="*"):
    if self._get_action() != ACTION:  # real STS takes it unsigned
        moto_auth(self, resource)


def role_backend(self, role_arn):
    """The IAM of the account a role ARN names (the caller's without one)."""
    found = re.match(r"arn:[^:]+:iam::(\d{12}):role/", role_arn or "")
    return iam_backends[found.group(1) if found else self.account_id][get_partition(self._region)]


moto_trust = IAMRequestBase._check_role_trust_relationship


def is_assuming_role_operation(self, resource_arn):
    if ":role" not in resource_arn.lower():
        return False
    try:
        role_backend(self, resource_arn).get_role_by_arn(resource_arn)
    except Exception:
        return False
    return self._action in REQUIRE_RESOURCE_ACCESS_POLICIES_CHECK


def check_role_trust_relationship(self, role_arn):
    # moto's own check, with the role's account as the backend it reads.
    mine = self.account_id
    found = re.match(r"arn:[^:]+:iam::(\d{12}):role/", role_arn or "")
    self.account_id = found.group(1) if found else mine
    try:
        return moto_trust(self, role_arn)
    finally:
        self.account_id = mine


TokenResponse.assume_role_with_web_identity = assume_role_with_web_identity
TokenResponse._authenticate_and_authorize_normal_action = authenticate
IAMRequestBase._is_assuming_role_operation = is_assuming_role_operation
IAMRequestBase._check_role_trust_relationship = check_role_trust_relationship

if __name__ == "__main__":
    server.main(["-H", sys.argv[1], "-p", sys.argv[2]])
