#!/usr/bin/env python3
"""Validates every manifest under deploy/ against its published schema, offline.

- Kubernetes kinds: kubernetes-validate's bundled JSON schemas, strict
  (unknown fields are errors), for the oldest and newest Kubernetes minor
  the manifests claim (KUBERNETES_VERSIONS).
- KEDA's ScaledObject and TriggerAuthentication (CRDs): the models that
  cloudcoil.models.keda generates from KEDA's published CRD schemas.
- The Cloud Run service (serving.knative.dev/v1 Service): the Cloud Run
  Admin API v1 schema, from the API's discovery document that
  google-api-python-client ships, strict; every run.googleapis.com/* and
  autoscaling.knative.dev/* annotation must be one that schema lists.

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
import pathlib
import re
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


def check(doc, discovery):
    """(errors, what it was checked against)."""
    kind = (doc.get("apiVersion"), doc.get("kind"))
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
]


def self_test(docs, discovery):
    by_kind = {doc.get("kind"): doc for _, doc in docs}
    missed = 0
    for kind, brk in BREAKS:
        doc = json.loads(json.dumps(by_kind[kind]))
        brk(doc)
        errors, _ = check(doc, discovery)
        if not errors:
            missed += 1
            print(f"SELF-TEST FAIL: a broken {kind} passed")
    print(f"self-test: {len(BREAKS) - missed} of {len(BREAKS)} broken manifests caught")
    return missed == 0


def main():
    root = pathlib.Path(__file__).resolve().parent
    discovery = cloud_run_discovery()
    docs = []
    for path in sorted(root.rglob("*.yaml")):
        with open(path) as f:
            docs.extend((path, d) for d in yaml.safe_load_all(f) if d)
    if "--self-test" in sys.argv[1:] and not self_test(docs, discovery):
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
    return 1 if failures or not checked else 0


if __name__ == "__main__":
    sys.exit(main())
