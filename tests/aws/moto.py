"""Sets up moto's server for tests/tests/aws.rs (it prints one JSON object).

  moto.py user ENDPOINT
      an IAM user `psbx` (psbx's own identity) allowed sts:AssumeRole, and its
      access key: {"accessKeyId", "secretAccessKey", "arn"}; in moto's default
      account, while every role, service, parameter and secret below is in
      the customer's account CUSTOMER (psbx refuses roles in its own account)
  moto.py roles ENDPOINT PRINCIPAL EXTERNAL_ID ACTIONS
      roles trusting PRINCIPAL: `readonly` with sts:ExternalId = EXTERNAL_ID,
      `wrong-external-id` with another ExternalId, `other-principal` trusting
      another principal; then moto's IAM checks are turned on
      (`/moto-api/reset-auth`), so trust policies are enforced:
      {"readonly", "wrongExternalId", "otherPrincipal", "noTaskDefinitions"}
      (their ARNs; `readonly` may do ACTIONS, psbx's `requiredActions`
      comma-separated, `no-task-definitions` all of them but
      ecs:DescribeTaskDefinition)
  moto.py ecs ENDPOINT
      cluster `prod` with service `api`, whose task definition `api:1` has
      two containers: `api` (plain values, an SSM SecureString by name and by
      ARN, Secrets Manager JSON keys, one at a version stage and id, a
      whole secret, an S3 environment file) and `envoy`; prints the values
      the import must find: {"api": {...}, "envoy": {...}, "s3File"}
  moto.py boxrole ENDPOINT ISSUER SUBJECT
      the IAM OIDC provider of ISSUER (psbx, audience sts.amazonaws.com) and
      the role `box-dev` as deploy/aws/box-role.yaml makes it: trusting web
      identities of that provider whose `sub` is SUBJECT; it may call
      sts:GetCallerIdentity: {"role"} (its ARN)
  moto.py revise ENDPOINT
      registers `api:2` (PLAIN changed, NEW added) and points the service at
      it: {"taskDefinition"}
  moto.py assumed ENDPOINT
      the roles anyone assumed so far, in any account: {"roleArns"}
  moto.py customer ENDPOINT
      temporary keys acting in CUSTOMER (for the AWS CLI, standing for the
      user who runs the commands psbx prints), moto's IAM checks off:
      {"accessKeyId", "secretAccessKey", "sessionToken", "account"}
  moto.py auth ENDPOINT on|off
      moto's IAM checks (trust policies enforced) on or off: {"auth"}
  moto.py bucket ENDPOINT NAME
      makes the S3 bucket NAME (in us-east-1): {"bucket"}
  moto.py objects ENDPOINT NAME
      the bucket's objects, and the multipart uploads begun and neither
      completed nor aborted, read with boto3 (not with the SDK psbx uses):
      {"objects": {key: size}, "etags": {key: etag}, "uploads": [key]}
      (a multipart object's ETag ends in -<parts>)
"""

import json
import sys
import urllib.request

import boto3


def client(service, endpoint, **keys):
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=keys.get("id", "testing"),
        aws_secret_access_key=keys.get("secret", "testing"),
    )


# The account of the customer's roles and services (not psbx's own).
CUSTOMER = "210987654321"


def customer(service, endpoint):
    """A client acting in CUSTOMER (moto switches accounts on an assumed role;
    moto's IAM checks must be off)."""
    sts = client("sts", endpoint)
    keys = sts.assume_role(RoleArn=f"arn:aws:iam::{CUSTOMER}:role/setup", RoleSessionName="setup")["Credentials"]
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=keys["AccessKeyId"],
        aws_secret_access_key=keys["SecretAccessKey"],
        aws_session_token=keys["SessionToken"],
    )


def assumed(endpoint):
    data = json.load(urllib.request.urlopen(endpoint + "/moto-api/data.json"))
    return {"roleArns": [r["role_arn"] for r in data.get("sts", {}).get("AssumedRole", [])]}


def user(endpoint):
    iam = client("iam", endpoint)
    made = iam.create_user(UserName="psbx")["User"]
    iam.put_user_policy(
        UserName="psbx",
        PolicyName="assume",
        PolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole", "Resource": "*"}],
            }
        ),
    )
    key = iam.create_access_key(UserName="psbx")["AccessKey"]
    return {"accessKeyId": key["AccessKeyId"], "secretAccessKey": key["SecretAccessKey"], "arn": made["Arn"]}


def trust(principal, external_id):
    statement = {"Effect": "Allow", "Principal": {"AWS": principal}, "Action": "sts:AssumeRole"}
    if external_id is not None:
        statement["Condition"] = {"StringEquals": {"sts:ExternalId": external_id}}
    return json.dumps({"Version": "2012-10-17", "Statement": [statement]})


def allow(actions):
    return json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}]}
    )


def auth(endpoint, on):
    """moto's IAM checks: on (every call's permissions, trust policies too) or off."""
    request = urllib.request.Request(endpoint + "/moto-api/reset-auth", data=b"0" if on else b"inf", method="POST")
    request.add_header("Content-Type", "text/plain")
    urllib.request.urlopen(request).read()


def roles(endpoint, principal, external_id, read_only):
    iam = customer("iam", endpoint)
    arns = {}
    for key, name, policy, actions in [
        ("readonly", "readonly", trust(principal, external_id), read_only),
        ("wrongExternalId", "wrong-external-id", trust(principal, "psbx-not-this-one"), read_only),
        (
            "otherPrincipal",
            "other-principal",
            trust("arn:aws:iam::123456789012:user/someone-else", external_id),
            read_only,
        ),
        (
            "noTaskDefinitions",
            "no-task-definitions",
            trust(principal, external_id),
            [a for a in read_only if a != "ecs:DescribeTaskDefinition"],
        ),
    ]:
        arns[key] = iam.create_role(RoleName=name, AssumeRolePolicyDocument=policy)["Role"]["Arn"]
        iam.put_role_policy(RoleName=name, PolicyName="read", PolicyDocument=allow(actions))
    auth(endpoint, True)
    return arns


# Values with what a .env and a shell make hard: spaces, quotes, '$', '#', '=',
# backslashes, non-ASCII.
PLAIN = "hello world # not a comment"
DB_PASS = "s3cr3t $HOME 'q' \\n \"dq\" ünï"
CREDS = {"user": "admin", "password": "p=w#1 $x", "port": 5432}


def ecs(endpoint):
    auth(endpoint, False)
    ssm = customer("ssm", endpoint)
    ssm.put_parameter(Name="/api/db_pass", Value=DB_PASS, Type="SecureString")
    ssm.put_parameter(Name="/api/db_url", Value="postgres://db.internal:5432/app", Type="SecureString")
    url_arn = ssm.get_parameter(Name="/api/db_url")["Parameter"]["ARN"]
    sm = customer("secretsmanager", endpoint)
    made = sm.create_secret(Name="api/creds", SecretString=json.dumps(CREDS))
    secret, version = made["ARN"], made["VersionId"]
    sm.create_secret(Name="api/token", SecretString="tok-123")
    token = sm.describe_secret(SecretId="api/token")["ARN"]
    s3_file = "arn:aws:s3:::psbx-test-config/api.env"
    api = {
        "name": "api",
        "image": "api:1",
        "memory": 256,
        "essential": True,
        "environment": [{"name": "PLAIN", "value": PLAIN}, {"name": "PORT", "value": "8080"}],
        "secrets": [
            {"name": "DB_PASS", "valueFrom": "/api/db_pass"},
            {"name": "DB_URL", "valueFrom": url_arn},
            {"name": "DB_USER", "valueFrom": f"{secret}:user::"},
            {"name": "DB_PW", "valueFrom": f"{secret}:password:AWSCURRENT:{version}"},
            {"name": "DB_PORT", "valueFrom": f"{secret}:port::"},
            {"name": "TOKEN", "valueFrom": token},
        ],
        "environmentFiles": [{"value": s3_file, "type": "s3"}],
    }
    envoy = {
        "name": "envoy",
        "image": "envoy:1",
        "memory": 128,
        "essential": True,
        "environment": [{"name": "ENVOY_UID", "value": "0"}],
    }
    e = customer("ecs", endpoint)
    e.create_cluster(clusterName="prod")
    e.register_task_definition(family="api", containerDefinitions=[envoy, api])
    e.create_service(cluster="prod", serviceName="api", taskDefinition="api", desiredCount=1)
    auth(endpoint, True)
    return {
        "api": {
            "PLAIN": PLAIN,
            "PORT": "8080",
            "DB_PASS": DB_PASS,
            "DB_URL": "postgres://db.internal:5432/app",
            "DB_USER": CREDS["user"],
            "DB_PW": CREDS["password"],
            "DB_PORT": "5432",
            "TOKEN": "tok-123",
        },
        "envoy": {"ENVOY_UID": "0"},
        "s3File": s3_file,
    }


def boxrole(endpoint, issuer, subject):
    auth(endpoint, False)
    iam = customer("iam", endpoint)
    provider = iam.create_open_id_connect_provider(
        Url=issuer, ClientIDList=["sts.amazonaws.com"], ThumbprintList=["0" * 40]
    )["OpenIDConnectProviderArn"]
    host = issuer.split("://", 1)[1].rstrip("/")
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Federated": provider},
                "Action": "sts:AssumeRoleWithWebIdentity",
                "Condition": {"StringEquals": {f"{host}:sub": subject, f"{host}:aud": "sts.amazonaws.com"}},
            }
        ],
    }
    role = iam.create_role(RoleName="box-dev", AssumeRolePolicyDocument=json.dumps(trust), MaxSessionDuration=3600)
    iam.put_role_policy(RoleName="box-dev", PolicyName="who", PolicyDocument=allow(["sts:GetCallerIdentity"]))
    auth(endpoint, True)
    return {"role": role["Role"]["Arn"]}


def revise(endpoint):
    auth(endpoint, False)
    e = customer("ecs", endpoint)
    current = e.describe_task_definition(taskDefinition="api")["taskDefinition"]
    containers = current["containerDefinitions"]
    for c in containers:
        if c["name"] == "api":
            c["environment"] = [{"name": "PLAIN", "value": "changed"}, {"name": "NEW", "value": "1"}] + [
                kv for kv in c["environment"] if kv["name"] not in ("PLAIN", "NEW")
            ]
    arn = e.register_task_definition(family="api", containerDefinitions=containers)["taskDefinition"][
        "taskDefinitionArn"
    ]
    e.update_service(cluster="prod", service="api", taskDefinition=arn)
    auth(endpoint, True)
    return {"taskDefinition": arn}


def customer_keys(endpoint):
    auth(endpoint, False)
    keys = client("sts", endpoint).assume_role(
        RoleArn=f"arn:aws:iam::{CUSTOMER}:role/setup", RoleSessionName="cli"
    )["Credentials"]
    return {
        "accessKeyId": keys["AccessKeyId"],
        "secretAccessKey": keys["SecretAccessKey"],
        "sessionToken": keys["SessionToken"],
        "account": CUSTOMER,
    }


def bucket(endpoint, name):
    client("s3", endpoint).create_bucket(Bucket=name)
    return {"bucket": name}


def objects(endpoint, name):
    s3 = client("s3", endpoint)
    found, etags = {}, {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name):
        for o in page.get("Contents", []):
            found[o["Key"]] = o["Size"]
            etags[o["Key"]] = o["ETag"].strip('"')
    uploads = s3.list_multipart_uploads(Bucket=name).get("Uploads", [])
    return {"objects": found, "etags": etags, "uploads": [u["Key"] for u in uploads]}


if __name__ == "__main__":
    what, endpoint = sys.argv[1], sys.argv[2]
    if what == "user":
        print(json.dumps(user(endpoint)))
    elif what == "roles":
        print(json.dumps(roles(endpoint, sys.argv[3], sys.argv[4], sys.argv[5].split(","))))
    elif what == "ecs":
        print(json.dumps(ecs(endpoint)))
    elif what == "boxrole":
        print(json.dumps(boxrole(endpoint, sys.argv[3], sys.argv[4])))
    elif what == "revise":
        print(json.dumps(revise(endpoint)))
    elif what == "assumed":
        print(json.dumps(assumed(endpoint)))
    elif what == "customer":
        print(json.dumps(customer_keys(endpoint)))
    elif what == "auth":
        auth(endpoint, sys.argv[3] == "on")
        print(json.dumps({"auth": sys.argv[3]}))
    elif what == "bucket":
        print(json.dumps(bucket(endpoint, sys.argv[3])))
    elif what == "objects":
        print(json.dumps(objects(endpoint, sys.argv[3])))
    else:
        sys.exit(f"unknown step {what!r}")
