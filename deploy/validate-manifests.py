#!/usr/bin/env python3
"""Validates every manifest under deploy/ against its published schema, offline.

- Kubernetes kinds: kubernetes-validate's bundled JSON schemas, strict
  (unknown fields are errors), for the oldest and newest Kubernetes minor
  the manifests claim (KUBERNETES_VERSIONS).
- KEDA's ScaledObject and TriggerAuthentication (CRDs): the models that
  cloudcoil.models.keda generates from KEDA's published CRD schemas.
- The Cloud Run service (serving.knative.dev/v1 Service) and worker pool
  (run.googleapis.com/v1 WorkerPool): the Cloud Run Admin API v1 schema,
  from the API's discovery document that google-api-python-client ships,
  strict; every run.googleapis.com/* and autoscaling.knative.dev/*
  annotation must be one that schema lists.
- GKE's PodMonitoring (Managed Service for Prometheus): no package ships
  its schema, so POD_MONITORING below is a closed JSON Schema written from
  the monitoring.googleapis.com/v1 API reference (every field of the spec
  and its scrape endpoints, their types, the required ones).
- The worker pool's autoscaler configuration (CREMA's CremaConfig): no
  schema exists; its scaled objects and trigger authentications are KEDA
  objects, checked with KEDA's models, and the fields CREMA documents as
  ignored are refused (check_crema).
- Every document, of every kind: no secret in plain text (check_secrets):
  no connection URL with a password, no HOTCOUNT_STORE (other than
  `firestore`), webhook secret or user hash key as an env value, no secret
  flag on the command line, no Kubernetes Secret with its data. Secrets
  come from Secret Manager, mounted as files (the `--...-file` flags) or
  through `valueFrom.secretKeyRef`.
- `--documented FILE`: every command of FILE's code blocks that renders
  manifests (deploy/render.sh) is run as written, up to the `kubectl
  apply` or gcloud file it feeds, and what it prints is checked like the
  files: same documents, none merged into another, each valid.

Every YAML stream is read with duplicate keys refused: manifests joined
without `---` parse as one object whose repeated keys a plain YAML loader
would silently drop.

A CRD model ignores fields it does not know, so each document is also
compared with the model's own dump: a field the schema dropped is an error.
Any kind without a schema here is an error, never a silent pass.
`--self-test` first breaks a copy of each manifest in a known way and
fails unless every break is caught (so a package update that stops
checking cannot pass everything unnoticed).
Nothing is fetched at run time: every schema ships inside the packages
(deploy/requirements-validate.txt), which .ci/run installs.
Exit code: 0 all valid, 1 otherwise.
"""

import json
import os
import pathlib
import re
import subprocess
import sys

import googleapiclient
import jsonschema
import kubernetes_validate
import yaml
from cloudcoil.models.keda import v1alpha1 as keda

KUBERNETES_VERSIONS = ["1.31", "1.35"]

CRD_MODELS = {
    ("keda.sh/v1alpha1", "ScaledObject"): keda.ScaledObject,
    ("keda.sh/v1alpha1", "TriggerAuthentication"): keda.TriggerAuthentication,
}

class UniqueKeyLoader(yaml.SafeLoader):
    """A YAML loader that refuses a key twice in one mapping."""


def _unique_mapping(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (documents joined without ---?)", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep)


UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def load_all(text):
    return [d for d in yaml.load_all(text, Loader=UniqueKeyLoader) if d]


DURATION = {"type": "string", "pattern": r"^([0-9]+(ms|s|m|h))+$"}
LABEL_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
        "matchExpressions": {"type": "array", "items": {"type": "object"}},
    },
}
# PodMonitoring (monitoring.googleapis.com/v1), from the API reference.
POD_MONITORING = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.googleapis.com/v1"},
        "kind": {"const": "PodMonitoring"},
        "metadata": {
            "type": "object",
            "required": ["name", "namespace"],
            "properties": {
                "name": {"type": "string"},
                "namespace": {"type": "string"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
            },
            "additionalProperties": False,
        },
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["endpoints", "selector"],
            "properties": {
                "selector": LABEL_SELECTOR,
                "filterRunning": {"type": "boolean"},
                "limits": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        k: {"type": "integer", "minimum": 0}
                        for k in ("labelNameLength", "labelValueLength", "labels", "samples")
                    },
                },
                "targetLabels": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "fromPod": {"type": "array", "items": {"type": "object"}},
                        "metadata": {"type": "array", "items": {"enum": ["pod", "container", "node", "top_level_controller_name", "top_level_controller_type"]}},
                    },
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["interval", "port"],
                        "properties": {
                            "port": {"type": ["integer", "string"]},
                            "path": {"type": "string", "pattern": "^/"},
                            "scheme": {"enum": ["http", "https"]},
                            "interval": DURATION,
                            "timeout": DURATION,
                            "params": {"type": "object"},
                            "proxyUrl": {"type": "string"},
                            "metricRelabeling": {"type": "array", "items": {"type": "object"}},
                            "authorization": {"type": "object"},
                            "basicAuth": {"type": "object"},
                            "oauth2": {"type": "object"},
                            "tls": {"type": "object"},
                        },
                    },
                },
            },
        },
    },
}

# Fields of a KEDA ScaledObject spec that CREMA ignores (its configuration
# reference): a value there would look like it does something.
CREMA_IGNORED = [
    "envSourceContainerName",
    "cooldownPeriod",
    "initialCooldownPeriod",
    "fallback",
    "restoreToOriginalReplicaCount",
    "pollingInterval",
]
CREMA_TARGET = re.compile(r"^projects/[^/]+/locations/[^/]+/(services|workerpools)/[^/]+$")


def check_crema(doc):
    errors = []
    unknown = set(doc) - {"apiVersion", "kind", "metadata", "spec"}
    errors += [f"{k}: not a CremaConfig field" for k in sorted(unknown)]
    spec = doc.get("spec") or {}
    unknown = set(spec) - {"scaledObjects", "triggerAuthentications", "pollingInterval"}
    errors += [f"spec.{k}: not a CremaConfig field" for k in sorted(unknown)]
    if not isinstance(spec.get("pollingInterval", 30), int):
        errors.append("spec.pollingInterval: not an integer (seconds)")
    for i, auth in enumerate(spec.get("triggerAuthentications") or []):
        where = f"spec.triggerAuthentications[{i}]"
        kinds = set((auth.get("spec") or {})) - {"podIdentity", "gcpSecretManager"}
        errors += [f"{where}.spec.{k}: CREMA supports only podIdentity (gcp) and gcpSecretManager" for k in sorted(kinds)]
        full = {"apiVersion": "keda.sh/v1alpha1", "kind": "TriggerAuthentication", **auth}
        errors += [f"{where}: {e}" for e in check_crd(keda.TriggerAuthentication, full)]
    objects = spec.get("scaledObjects") or []
    if not objects:
        errors.append("spec.scaledObjects: none")
    for i, obj in enumerate(objects):
        where = f"spec.scaledObjects[{i}]"
        extra = set(obj) - {"spec"}
        errors += [f"{where}.{k}: not a CremaConfig field" for k in sorted(extra)]
        so = obj.get("spec") or {}
        errors += [f"{where}.spec.{k}: ignored by CREMA" for k in CREMA_IGNORED if k in so]
        target = (so.get("scaleTargetRef") or {}).get("name", "")
        if not CREMA_TARGET.match(target):
            errors.append(f"{where}.spec.scaleTargetRef.name: {target!r} is not projects/*/locations/*/(services|workerpools)/*")
        full = {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": f"crema-{i}"}, "spec": so}
        errors += [f"{where}: {e}" for e in check_crd(keda.ScaledObject, full)]
    return errors


CLOUD_RUN_KINDS = {
    ("serving.knative.dev/v1", "Service"): "Service",
    ("run.googleapis.com/v1", "WorkerPool"): "WorkerPool",
}


def cloud_run_discovery():
    path = (
        pathlib.Path(googleapiclient.__file__).parent
        / "discovery_cache"
        / "documents"
        / "run.v1.json"
    )
    with open(path) as f:
        return json.load(f)


def to_json_schema(node):
    """A discovery-document schema as JSON Schema; objects closed to unknown fields."""
    if "$ref" in node:
        return {"$ref": f"#/definitions/{node['$ref']}"}
    kind = node.get("type")
    if kind == "object":
        out = {"type": "object"}
        if "properties" in node:
            out["properties"] = {k: to_json_schema(v) for k, v in node["properties"].items()}
            out["additionalProperties"] = False
        elif "additionalProperties" in node:
            out["additionalProperties"] = to_json_schema(node["additionalProperties"])
        return out
    if kind == "array":
        return {"type": "array", "items": to_json_schema(node.get("items", {}))}
    if kind == "integer" and node.get("format") in ("int64", "uint64"):
        # int64 travels as a JSON string; YAML tools accept either.
        return {"type": ["integer", "string"]}
    if kind in ("string", "integer", "number", "boolean"):
        return {"type": kind}
    return {}


def check_cloud_run(doc, discovery):
    kind = CLOUD_RUN_KINDS[(doc.get("apiVersion"), doc.get("kind"))]
    definitions = {k: to_json_schema(v) for k, v in discovery["schemas"].items()}
    schema = {"$ref": f"#/definitions/{kind}", "definitions": definitions}
    validator = jsonschema.Draft7Validator(schema)
    errors = [
        f"{'.'.join(str(p) for p in e.absolute_path)}: {e.message}"
        for e in validator.iter_errors(doc)
    ]
    listed = discovery["schemas"]["ObjectMeta"]["properties"]["annotations"]["description"]
    allowed = set(re.findall(r"`((?:run\.googleapis\.com|autoscaling\.knative\.dev)/[^`]+)`", listed))
    for where, meta in annotated(doc):
        for key in meta.get("annotations", {}):
            if key.startswith(("run.googleapis.com/", "autoscaling.knative.dev/")) and key not in allowed:
                errors.append(f"{where}.annotations: {key} is not a Cloud Run annotation")
    return errors


def annotated(doc, where=""):
    """Every metadata object in `doc`, with its path."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            here = f"{where}.{key}" if where else key
            if key == "metadata" and isinstance(value, dict):
                yield here, value
            yield from annotated(value, here)
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield from annotated(value, f"{where}[{i}]")


def dropped(original, dumped, path=""):
    """Paths present in `original` that the model's dump lost."""
    lost = []
    if isinstance(original, dict):
        if not isinstance(dumped, dict):
            return [path or "."]
        for key, value in original.items():
            here = f"{path}.{key}" if path else key
            if key not in dumped:
                lost.append(here)
            else:
                lost.extend(dropped(value, dumped[key], here))
    elif isinstance(original, list):
        if not isinstance(dumped, list) or len(dumped) != len(original):
            return [path]
        for i, (a, b) in enumerate(zip(original, dumped)):
            lost.extend(dropped(a, b, f"{path}[{i}]"))
    return lost


def check_crd(model, doc):
    try:
        parsed = model.model_validate(doc)
    except Exception as e:  # pydantic.ValidationError, with every bad field
        return [str(e)]
    dump = parsed.model_dump(by_alias=True, exclude_unset=True, mode="json")
    return [f"{p}: not in the schema" for p in dropped(doc, dump)]


def check_kubernetes(doc):
    errors = []
    for version in KUBERNETES_VERSIONS:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            where = ".".join(str(p) for p in e.path)
            errors.append(f"Kubernetes {version}: {where}: {e.message}")
        except kubernetes_validate.SchemaNotFoundError as e:
            errors.append(f"Kubernetes {version}: {e.message}")
    return errors


def check_json_schema(schema, doc):
    validator = jsonschema.Draft7Validator(schema)
    return [
        f"{'.'.join(str(p) for p in e.absolute_path)}: {e.message}"
        for e in validator.iter_errors(doc)
    ]


# Settings that hold a secret: in a manifest only as the `_FILE` form (a
# mounted secret) or `valueFrom.secretKeyRef`, never as a value.
SECRET_ENV = {
    "HOTCOUNT_STORE": "HOTCOUNT_STORE_FILE",
    "HOTCOUNT_MILESTONE_WEBHOOK_SECRET": "HOTCOUNT_MILESTONE_WEBHOOK_SECRET_FILE",
    "HOTCOUNT_MILESTONE_WEBHOOK_PREVIOUS_SECRET": "HOTCOUNT_MILESTONE_WEBHOOK_PREVIOUS_SECRET_FILE",
    "HOTCOUNT_USER_HASH_KEY": "HOTCOUNT_USER_HASH_KEY_FILE",
}
SECRET_FLAGS = ["--milestone-webhook-secret", "--milestone-webhook-previous-secret", "--user-hash-key"]
# A connection URL with a password: in its user part, or as a parameter.
PASSWORD_IN_URL = re.compile(r"[a-z][a-z0-9+.-]*://[^/\s@:]*:[^/\s@]+@|[?&]password=", re.IGNORECASE)


def strings(node, where=""):
    """Every string in `node`, with its path."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from strings(value, f"{where}.{key}" if where else str(key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from strings(value, f"{where}[{i}]")
    elif isinstance(node, str):
        yield where, node


def containers(node, where=""):
    """Every container (an item of a `containers` list) in `node`, with its path."""
    if isinstance(node, dict):
        for key, value in node.items():
            here = f"{where}.{key}" if where else key
            if key in ("containers", "initContainers") and isinstance(value, list):
                for i, c in enumerate(value):
                    if isinstance(c, dict):
                        yield f"{here}[{i}]", c
            else:
                yield from containers(value, here)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from containers(value, f"{where}[{i}]")


def check_secrets(doc):
    """Secrets in plain text: a URL with a password anywhere, a secret
    setting given as a value (env or flag), a Kubernetes Secret's data."""
    errors = []
    for where, text in strings(doc):
        if PASSWORD_IN_URL.search(text):
            errors.append(f"{where}: a URL with a password in plain text (mount it as a secret: --store-file)")
    for where, c in containers(doc):
        env_list = c.get("env") if isinstance(c.get("env"), list) else []
        for i, env in enumerate(e for e in env_list if isinstance(e, dict)):
            name = env.get("name")
            if name in SECRET_ENV and "value" in env and not (name == "HOTCOUNT_STORE" and env["value"] == "firestore"):
                errors.append(
                    f"{where}.env[{i}]: {name} as a plain value; use {SECRET_ENV[name]} on a mounted secret, or valueFrom.secretKeyRef"
                )
        words = [w for key in ("command", "args") if isinstance(c.get(key), list) for w in c[key] if isinstance(w, str)]
        for word in words:
            flag = word.split("=", 1)[0]
            if flag in SECRET_FLAGS:
                errors.append(f"{where}: {flag} on the command line; use {flag}-file on a mounted secret")
    if doc.get("kind") == "Secret" and (doc.get("data") or doc.get("stringData")):
        errors.append("a Secret's values in a manifest: create it from Secret Manager (deploy/setup.sh), never from a file in the repository")
    return errors


def check(doc, discovery):
    """(errors, what it was checked against); every kind is also checked
    for secrets in plain text (check_secrets)."""
    errors, schema = check_schema(doc, discovery)
    return errors + check_secrets(doc), schema


def check_schema(doc, discovery):
    """(errors, what it was checked against)."""
    kind = (doc.get("apiVersion"), doc.get("kind"))
    if kind == ("monitoring.googleapis.com/v1", "PodMonitoring"):
        return check_json_schema(POD_MONITORING, doc), "PodMonitoring v1 API reference"
    if kind == ("crema/v1", "CremaConfig"):
        return check_crema(doc), "CREMA config: KEDA models"
    model = CRD_MODELS.get(kind)
    if model:
        return check_crd(model, doc), "KEDA CRD model"
    if kind in CLOUD_RUN_KINDS:
        return check_cloud_run(doc, discovery), "Cloud Run Admin API v1"
    return check_kubernetes(doc), "Kubernetes " + ", ".join(KUBERNETES_VERSIONS)


# (kind, how to break it): each must make the check fail.
BREAKS = [
    ("Deployment", lambda d: d["spec"]["template"]["spec"].update(terminationGracePeriod=12)),
    ("Deployment", lambda d: d["spec"]["template"]["spec"]["containers"][0].update(image=7)),
    ("HorizontalPodAutoscaler", lambda d: d["spec"].update(minReplica=2)),
    ("PodDisruptionBudget", lambda d: d["spec"].update(maxUnavailable=[1])),
    ("ScaledObject", lambda d: d["spec"].update(minReplicas=2)),
    ("ScaledObject", lambda d: d["spec"].update(minReplicaCount="two")),
    ("ScaledObject", lambda d: d["spec"]["triggers"][0].update(authRef={"name": "x"})),
    ("TriggerAuthentication", lambda d: d["spec"].update(podIdentity={"provider": "gcp", "x": 1})),
    ("Service", lambda d: d["spec"]["template"]["spec"].update(concurrency=80)),
    ("Service", lambda d: d["spec"]["template"]["metadata"]["annotations"].update({"run.googleapis.com/cpu-throttle": "false"})),
    ("Namespace", lambda d: d.update(kind="Namespaces")),
    ("WorkerPool", lambda d: d["spec"].update(instanceCount=2)),
    ("WorkerPool", lambda d: d["spec"]["template"]["spec"]["containers"][0].update(env={"A": "b"})),
    ("PodMonitoring", lambda d: d["spec"]["endpoints"][0].update(interval="30 seconds")),
    ("PodMonitoring", lambda d: d["spec"].update(endpoint=[])),
    ("CremaConfig", lambda d: d["spec"]["scaledObjects"][0]["spec"].update(cooldownPeriod=60)),
    ("CremaConfig", lambda d: d["spec"]["scaledObjects"][0]["spec"]["scaleTargetRef"].update(name="hotcount")),
    ("CremaConfig", lambda d: d["spec"]["scaledObjects"][0]["spec"]["triggers"][0].update(authRef={"name": "x"})),
    # Plaintext secrets (schema-valid: only check_secrets catches them).
    ("Deployment", lambda d: d["spec"]["template"]["spec"]["containers"][0]["env"].append(
        {"name": "HOTCOUNT_STORE", "value": "postgres://hotcount:s3cret@10.0.0.3:5432/hotcount"})),
    ("Deployment", lambda d: d["spec"]["template"]["spec"]["containers"][0].update(
        args=["run", "--milestone-webhook-secret", "s3cret"])),
    ("WorkerPool", lambda d: d["spec"]["template"]["spec"]["containers"][0].update(
        args=["run", "--store=postgresql://hotcount:s3cret@10.0.0.3/hotcount"])),
    ("WorkerPool", lambda d: d["spec"]["template"]["spec"]["containers"][0]["env"].append(
        {"name": "HOTCOUNT_USER_HASH_KEY", "value": "k3y"})),
    ("Service", lambda d: d["spec"]["template"]["spec"]["containers"][0]["env"].append(
        {"name": "HOTCOUNT_MILESTONE_WEBHOOK_SECRET", "value": "s3cret"})),
    ("Service", lambda d: d["spec"]["template"]["spec"]["containers"][0]["env"].append(
        {"name": "DATABASE_URL", "value": "postgres://hotcount@10.0.0.3/hotcount?password=s3cret"})),
]


def documented_commands(path):
    """Commands of `path`'s code blocks that render or apply manifests
    (deploy/render.sh, `... | kubectl apply -f -`), continuation lines
    joined, with the line each starts on."""
    commands = []
    exports = []
    fenced = False
    start, command = None, ""
    for number, line in enumerate(pathlib.Path(path).read_text().splitlines(), 1):
        if line.strip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            continue
        if start is None:
            start, command = number, ""
        command += " " + line.strip().rstrip("\\")
        if line.rstrip().endswith("\\"):
            continue
        command = " ".join(command.split())
        if command.startswith("export "):
            # Joined with `;` below, a trailing comment would swallow the
            # rest: it ends at the line's end in the reader's shell.
            exports.append(re.sub(r"\s+#.*$", "", command))
        # Dashboards and alert policies rendered for gcloud are JSON, not
        # manifests (tests/doc_claims.rs renders each and parses it).
        renders_json = "dashboards/" in command or '"$f"' in command
        renders = "deploy/render.sh" in command or re.search(r"\|\s*kubectl apply -f -", command)
        if renders and not renders_json:
            # The page's `export` lines before it are in force, as in the
            # reader's shell.
            commands.append((start, "; ".join(exports + [command])))
        start = None
    return commands


def render_documented(command, repo):
    """Runs a documented render command up to what it feeds; returns (files, output)."""
    render = command
    render = re.sub(r"\|\s*kubectl apply -f -\s*$", "", render)
    render = re.sub(r">\s*\S+\s*$", "", render)
    files = [
        f for word in re.findall(r"deploy/[\w./{},*-]+\.yaml", render)
        for f in sorted(str(p.relative_to(repo)) for p in repo.glob(word))
    ]
    out = subprocess.run(
        ["bash", "-c", render], cwd=repo, capture_output=True, text=True,
        env={k: v for k, v in os.environ.items() if k not in ("PROJECT_ID", "REGION", "TAG")},
    )
    if out.returncode != 0:
        raise RuntimeError(f"exit {out.returncode}: {out.stderr.strip()}")
    return files, out.stdout


def check_documented(path, repo, discovery):
    failures = 0
    commands = documented_commands(path)
    if not commands:
        print(f"FAIL {path}: no deploy/render.sh command found")
        return 1
    for line, command in commands:
        where = f"{pathlib.Path(path).name}:{line}"
        try:
            files, output = render_documented(command, repo)
            docs = load_all(output)
        except Exception as e:  # a failed command or a stream that does not parse
            failures += 1
            print(f"FAIL {where}: {command}\n     {e}")
            continue
        expected = sum(len(load_all((repo / f).read_text())) for f in files)
        errors = []
        if len(docs) != expected:
            errors.append(f"{len(docs)} documents from {len(files)} files holding {expected}")
        for doc in docs:
            doc_errors, _ = check(doc, discovery)
            errors += [f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}: {e}" for e in doc_errors]
        if errors:
            failures += 1
            for e in errors:
                print(f"FAIL {where}: {e}")
        else:
            kinds = ", ".join(d.get("kind") for d in docs)
            print(f"ok   {where}: the documented command renders {len(docs)} valid documents ({kinds})")
    return failures


def self_test(docs, discovery, root):
    by_kind = {doc.get("kind"): doc for _, doc in docs}
    missed = 0
    # The GKE manifests joined as the old docs did (sed over five files, no
    # `---` between them) must not parse.
    joined = "".join((root / "gke" / f).read_text() for f in ("namespace.yaml", "serviceaccount.yaml", "deployment.yaml"))
    try:
        load_all(joined)
        missed += 1
        print("SELF-TEST FAIL: manifests joined without --- parsed")
    except yaml.YAMLError:
        pass
    for kind, brk in BREAKS:
        doc = json.loads(json.dumps(by_kind[kind]))
        brk(doc)
        errors, _ = check(doc, discovery)
        if not errors:
            missed += 1
            print(f"SELF-TEST FAIL: a broken {kind} passed")
    print(f"self-test: {len(BREAKS) + 1 - missed} of {len(BREAKS) + 1} broken manifests caught")
    return missed == 0


def main():
    root = pathlib.Path(__file__).resolve().parent
    discovery = cloud_run_discovery()
    docs = []
    for path in sorted(root.rglob("*.yaml")):
        try:
            docs.extend((path, d) for d in load_all(path.read_text()))
        except yaml.YAMLError as e:
            print(f"FAIL {path.relative_to(root.parent)}: {e}")
            return 1
    args = sys.argv[1:]
    if "--self-test" in args and not self_test(docs, discovery, root):
        return 1
    failures = 0
    checked = 0
    for path, doc in docs:
        name = f"{path.relative_to(root.parent)} {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        errors, schema = check(doc, discovery)
        checked += 1
        if errors:
            failures += 1
            for error in errors:
                print(f"FAIL {name}: {error}")
        else:
            print(f"ok   {name} ({schema})")
    print(f"{checked} manifests checked, {failures} invalid")
    if "--documented" in args:
        at = args.index("--documented")
        failures += check_documented(args[at + 1], root.parent, discovery)
    return 1 if failures or not checked else 0


if __name__ == "__main__":
    sys.exit(main())
