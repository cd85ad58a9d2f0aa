"""A small client of one box's `sprout serve` API over urllib: model versions (and their
deletion), weights as safetensors (down and up), fine-tuning jobs polled to their end, and
evaluations."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from urllib.parse import quote, urlencode

import numpy as np
from safetensors.numpy import load as load_safetensors
from safetensors.numpy import save as save_safetensors

Arrays = dict[str, np.ndarray]


class ServiceError(RuntimeError):
    """A request the service refused or could not answer, with its status and message."""


def check_layout(given: Arrays, expected: Arrays, what: str) -> None:
    """Raises ValueError unless `given` has exactly the names and shapes of `expected`."""
    missing = sorted(set(expected) - set(given))
    extra = sorted(set(given) - set(expected))
    if missing or extra:
        raise ValueError(f"{what}: tensors missing {missing}, unknown {extra}")
    for name, array in given.items():
        if tuple(array.shape) != tuple(expected[name].shape):
            raise ValueError(
                f"{what}: tensor '{name}' has shape {list(array.shape)}, "
                f"the model's is {list(expected[name].shape)}"
            )


def encode_offset(arrays: Arrays) -> str:
    """Arrays as a base64 safetensors file, a job request's `gradient_offset`."""
    body = save_safetensors({k: np.ascontiguousarray(v, np.float32) for k, v in arrays.items()})
    return base64.b64encode(body).decode("ascii")


class Service:
    """One box's service at `url` (e.g. http://127.0.0.1:8080), used with bearer `token`."""

    def __init__(self, url: str, token: str, timeout: float = 120.0) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def _call(
        self,
        method: str,
        path: str,
        query: dict | None = None,
        body: bytes | None = None,
        content_type: str = "application/octet-stream",
    ) -> bytes:
        url = f"{self.url}/api/v1{path}"
        if query:
            url += "?" + urlencode(query)
        request = urllib.request.Request(url, data=body, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        if body is not None:
            request.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return response.read()
        except urllib.error.HTTPError as error:
            text = error.read().decode("utf-8", "replace")
            try:
                text = json.loads(text)["error"]
            except (ValueError, KeyError, TypeError):
                pass
            raise ServiceError(f"{method} {url}: {error.code} {text}") from None
        except urllib.error.URLError as error:
            raise ServiceError(f"{method} {url}: {error.reason}") from None

    def _json(self, method: str, path: str, query: dict | None = None, body=None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        return json.loads(self._call(method, path, query, data, "application/json"))

    def current_version(self, model: str) -> int:
        """The version of `model` predictions use now."""
        version = self._json("GET", f"/models/{quote(model)}")["current_version"]
        if version is None:
            raise ServiceError(f"model '{model}' has no current version")
        return version

    def images(self, dataset: str) -> int:
        """How many images data set `dataset` holds."""
        return self._json("GET", f"/datasets/{quote(dataset)}")["dataset"]["images"]

    def weights(self, model: str, version: int, trainable: str | None = None) -> Arrays:
        """The parameters of `model`'s `version` by name (only the `trainable` selection)."""
        query = {"format": "safetensors"}
        if trainable:
            query["trainable"] = trainable
        path = f"/models/{quote(model)}/versions/{version}/file"
        return load_safetensors(self._call("GET", path, query))

    def apply(self, model: str, version: int, arrays: Arrays, promote: bool = False) -> int:
        """Registers `arrays` applied onto `model`'s `version` as its next version."""
        body = save_safetensors({k: np.ascontiguousarray(v, np.float32) for k, v in arrays.items()})
        path = f"/models/{quote(model)}/versions/{version}/weights"
        answer = json.loads(self._call("POST", path, {"promote": str(promote).lower()}, body))
        return answer["version"]

    def delete_version(self, model: str, version: int) -> None:
        """Deletes `model`'s `version` (the service refuses the current one and others still
        needed with a 409)."""
        self._call("DELETE", f"/models/{quote(model)}/versions/{version}")

    def evaluate(self, model: str, version: int, dataset: str, arrays: Arrays | None) -> dict:
        """Accuracy, loss and samples of `model`'s `version` (with `arrays` in place of its
        own) on every image of `dataset`."""
        body = b""
        if arrays:
            body = save_safetensors({k: np.ascontiguousarray(v, np.float32) for k, v in arrays.items()})
        path = f"/models/{quote(model)}/versions/{version}/evaluate"
        return json.loads(self._call("POST", path, {"dataset": dataset}, body))

    def train(self, request: dict, poll: float = 0.5, timeout: float = 3600.0) -> dict:
        """Starts a fine-tuning job and waits until it ends; returns the succeeded job."""
        job = self._json("POST", "/jobs", body=request)
        started = time.monotonic()
        while job["status"] not in ("succeeded", "failed", "cancelled"):
            if time.monotonic() - started > timeout:
                raise ServiceError(f"job {job['id']} still {job['status']} after {timeout} s")
            time.sleep(poll)
            job = self._json("GET", f"/jobs/{job['id']}")
        if job["status"] != "succeeded":
            raise ServiceError(f"job {job['id']} {job['status']}: {job.get('error')}")
        return job

    def version_metrics(self, model: str, version: int) -> dict:
        """What the job that made `model`'s `version` measured (best_accuracy,
        final_accuracy, final_loss, samples: its validation images, ...)."""
        for entry in self._json("GET", f"/models/{quote(model)}")["versions"]:
            if entry["version"] == version:
                return entry["metrics"]
        raise ServiceError(f"model '{model}' has no version {version}")
