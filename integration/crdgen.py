"""crds/*.yaml generated from models/ (`python -m integration.crdgen`), so the CRDs kai-cp
installs accept exactly what kai-cp reads and writes.

The schemas type the fields of KAI's API that models/ knows and keep unknown fields
(`x-kubernetes-preserve-unknown-fields`, as the models keep them): an object written by KAI
validates here, and an object kai-cp writes validates against KAI's CRDs. They also carry the
validation KAI's CRDs apply (required fields, enums, minimums, patterns, CEL rules: the models'
`crd_schema` facets), so an object accepted here is accepted by KAI and parsed by kai-cp's
loader. A kind whose model types a status (Queue, PodGroup, BindRequest) has a status
subresource, as in KAI's CRDs; Topology has neither, as KAI's."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from models import BindRequest, PodGroup, Queue, Topology

OUT = Path(__file__).resolve().parent.parent / "crds"

# (model, group, version, plural, singular, scope, short names, printer columns)
KINDS = (
    (Queue, "scheduling.run.ai", "v2", "queues", "queue", "Cluster", [],
     [("Priority", "integer", ".spec.priority"), ("Parent", "string", ".spec.parentQueue")]),
    (PodGroup, "scheduling.run.ai", "v2alpha2", "podgroups", "podgroup", "Namespaced", ["pg"],
     [("Queue", "string", ".spec.queue"), ("MinMember", "integer", ".spec.minMember")]),
    (BindRequest, "scheduling.run.ai", "v1alpha2", "bindrequests", "bindrequest", "Namespaced", [],
     [("Pod", "string", ".spec.podName"), ("Node", "string", ".spec.selectedNode"), ("Phase", "string", ".status.phase")]),
    (Topology, "kai.scheduler", "v1alpha1", "topologies", "topology", "Cluster", [], []),
)


# Validation facets copied from the models' JSON schema (pydantic constraints or `crd_schema`).
FACETS = ("format", "enum", "minimum", "maximum", "minLength", "maxLength", "pattern", "minItems", "maxItems",
          "x-kubernetes-list-type", "x-kubernetes-validations")


def _structural(s: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """pydantic JSON schema -> Kubernetes structural OpenAPI v3 schema. Facets written beside a
    `$ref` or an Optional's `anyOf` (a field's own) apply to the schema they wrap."""
    out = _shape(s, defs)
    for k in FACETS:
        if k in s and out.get("type") is not None:
            out[k] = s[k]
    return out


def _shape(s: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in s:
        return _structural(defs[s["$ref"].split("/")[-1]], defs)
    if "anyOf" in s:
        options = [o for o in s["anyOf"] if o.get("type") != "null"]
        types = {o.get("type") for o in options}
        if len(options) == 1:
            return _structural(options[0], defs)
        if types <= {"integer", "string"}:
            return {"x-kubernetes-int-or-string": True}
        if types <= {"integer", "number"}:
            return {"type": "number"}
        return {"x-kubernetes-preserve-unknown-fields": True}
    t = s.get("type")
    out: dict[str, Any] = {}
    if t == "object" or "properties" in s:
        out["type"] = "object"
        if s.get("properties"):
            out["properties"] = {k: _structural(v, defs) for k, v in s["properties"].items()}
        if s.get("required"):
            out["required"] = list(s["required"])
        ap = s.get("additionalProperties")
        if isinstance(ap, dict):
            out["additionalProperties"] = _structural(ap, defs)
        elif ap is not False:
            out["x-kubernetes-preserve-unknown-fields"] = True
        return out
    if t == "array":
        return {"type": "array", "items": _structural(s.get("items") or {}, defs)}
    if t in ("string", "integer", "number", "boolean"):
        out["type"] = t
        return out
    return {"x-kubernetes-preserve-unknown-fields": True}


def crd(model, group, version, plural, singular, scope, short, columns) -> dict[str, Any]:
    full = model.model_json_schema(by_alias=True, mode="validation")
    defs = full.get("$defs", {})
    props = full.get("properties", {})
    schema = {"type": "object", "description": (model.__doc__ or "").strip().split("\n")[0] or None,
              "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"}}}
    for part in ("spec", "status"):
        if part in props and model.model_fields[part].annotation is not Any:    # Topology: no status
            schema["properties"][part] = _structural(props[part], defs)
    if schema["properties"].get("spec", {}).get("required"):
        schema["required"] = ["spec"]      # a spec with required fields must be there (Topology, as KAI's)
    if not schema["description"]:
        del schema["description"]
    names = {"kind": model.KIND, "listKind": model.KIND + "List", "plural": plural, "singular": singular}
    if short:
        names["shortNames"] = short
    ver: dict[str, Any] = {"name": version, "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}
    if "status" in schema["properties"]:
        ver["subresources"] = {"status": {}}
    if columns:
        ver["additionalPrinterColumns"] = [{"name": n, "type": t, "jsonPath": p} for n, t, p in columns] + \
            [{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}", "annotations": {"kai-cp/generated-from": f"models.{model.__name__}"}},
            "spec": {"group": group, "names": names, "scope": scope, "versions": [ver]}}


def render() -> dict[str, str]:
    out = {}
    for k in KINDS:
        doc = crd(*k)
        text = "# Generated from models/ by `python -m integration.crdgen`; do not edit.\n" + \
            yaml.safe_dump(doc, sort_keys=False, width=120)
        out[f"{k[1]}_{k[3]}.yaml"] = text
    return out


def main(argv: list[str] | None = None) -> int:
    check = "--check" in (argv or sys.argv[1:])
    stale = []
    for name, text in render().items():
        path = OUT / name
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print("crds/ is out of date with models/: " + ", ".join(stale) + " (run python -m integration.crdgen)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
