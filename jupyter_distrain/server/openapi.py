"""The OpenAPI document of the extension: openapi.yaml with the job spec schema put in place.

`python -m jupyter_distrain.server.openapi` prints it (the frontend's types are generated from it).
"""

from __future__ import annotations

import json
from functools import cache
from importlib.resources import files

import yaml

from .. import spec as spec_


@cache
def openapi_document() -> dict:
    """One job schema for Python, the panel and the API: job.schema.json becomes components/schemas/JobSpec;
    every operation may answer the backend's failures (components/responses/Unavailable)."""
    document = yaml.safe_load(files("jupyter_distrain").joinpath("openapi.yaml").read_text())
    job_spec = json.loads(json.dumps(spec_.schema()).replace('"#/$defs/', '"#/components/schemas/'))
    schemas = document["components"]["schemas"]
    schemas.update(job_spec.pop("$defs"))
    schemas["JobSpec"] = {key: value for key, value in job_spec.items() if key not in ("$schema", "$id")}
    for path in document["paths"].values():  # what any operation may answer when the backend cannot
        for operation in path.values():
            if isinstance(operation, dict) and "responses" in operation:
                operation["responses"].setdefault("5XX", {"$ref": "#/components/responses/Unavailable"})
    return document


if __name__ == "__main__":
    print(json.dumps(openapi_document(), indent=1))
