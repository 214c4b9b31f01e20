#!/usr/bin/python3
"""Checks Kubernetes manifests against the API models of the `kubernetes` Python package
(Debian's python3-kubernetes), without a cluster: every field of every document must be one
the model knows, of the model's type, and required fields must be present (the models'
own client-side validation). Prints the documents as one JSON array on stdout.

    /usr/bin/python3 deploy/kubernetes/validate.py deploy/kubernetes/*.yaml

Exits 1, naming each problem by its path (`StatefulSet/engram: spec.template...`), when a
document does not fit. The package's models are those of its Kubernetes release (1.22 for
Debian 12's 22.6): fields added since are reported as unknown.
"""

import json
import sys

import yaml
from kubernetes import client

PRIMITIVES = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    # int-or-string (ports, maxUnavailable) and free-form fields.
    "object": (object,),
    "datetime": (str,),
    "date": (str,),
}


def check(value, type_name, path, problems):
    """Appends to `problems` what does not fit `type_name` in `value`, found at `path`."""
    if type_name.startswith("list["):
        if not isinstance(value, list):
            problems.append(f"{path}: expected a list, found {type(value).__name__}")
            return
        for i, item in enumerate(value):
            check(item, type_name[5:-1], f"{path}[{i}]", problems)
    elif type_name.startswith("dict("):
        if not isinstance(value, dict):
            problems.append(f"{path}: expected a map, found {type(value).__name__}")
            return
        inner = type_name[5:-1].split(", ", 1)[1]
        for key, item in value.items():
            check(item, inner, f"{path}.{key}", problems)
    elif type_name in PRIMITIVES:
        expected = PRIMITIVES[type_name]
        if type_name in ("int", "float") and isinstance(value, bool):
            problems.append(f"{path}: expected {type_name}, found bool")
        elif not isinstance(value, expected):
            problems.append(f"{path}: expected {type_name}, found {type(value).__name__}")
    else:
        check_model(value, getattr(client, type_name), path, problems)


def check_model(value, model, path, problems):
    if not isinstance(value, dict):
        problems.append(f"{path}: expected an object ({model.__name__}), found {type(value).__name__}")
        return
    attributes = {key: attr for attr, key in model.attribute_map.items()}
    present = {}
    for key, item in value.items():
        if key not in attributes:
            problems.append(f"{path}.{key}: unknown field of {model.__name__}")
            continue
        attr = attributes[key]
        present[attr] = item
        check(item, model.openapi_types[attr], f"{path}.{key}", problems)
    # The model's constructor refuses a missing required field and values outside an enum.
    try:
        model(**present)
    except ValueError as err:
        problems.append(f"{path}: {err}")


def main(paths):
    documents, problems = [], []
    for path in paths:
        with open(path, encoding="utf-8") as file:
            for document in yaml.safe_load_all(file):
                if document is None:
                    continue
                api_version, kind = document.get("apiVersion", ""), document.get("kind", "")
                name = document.get("metadata", {}).get("name", "?")
                version = api_version.rsplit("/", 1)[-1]
                model = getattr(client, version[:1].upper() + version[1:] + kind, None)
                if model is None:
                    problems.append(f"{path}: {kind}/{name}: no model for {api_version} {kind}")
                else:
                    check_model(document, model, f"{kind}/{name}", problems)
                documents.append(document)
    for problem in problems:
        print(problem, file=sys.stderr)
    json.dump(documents, sys.stdout)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
