"""One image build through the Docker API, from an in-memory context; errors carry the build's last lines."""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping

import docker
from docker.errors import APIError, BuildError, ImageNotFound
from docker.models.images import Image

from worldfactory.images.context import context_tar
from worldfactory.images.engine import HINT, ImageError

Log = Callable[[str], None]


def find_image(client: docker.DockerClient, ref: str) -> Image | None:
    try:
        return client.images.get(ref)
    except ImageNotFound:
        return None


def build_image(client: docker.DockerClient, files: Mapping[str, bytes], tag: str, what: str,
                labels: Mapping[str, str] | None = None, log: Log | None = None,
                missing_base: str | None = None) -> Image:
    """Build `files` (a context with a Dockerfile) as `tag`; ImageError naming `what` and the output's tail."""
    if missing_base is not None and find_image(client, missing_base) is None:
        raise ImageError(f"building {what}: the base image {missing_base} is not in the engine; {HINT}")
    lines: list[str] = []
    try:
        stream = client.api.build(fileobj=io.BytesIO(context_tar(files)), custom_context=True, tag=tag, rm=True,
                                  forcerm=True, pull=False, decode=True, labels=dict(labels or {}))
        for chunk in stream:
            if "error" in chunk or "errorDetail" in chunk:
                message = chunk.get("error") or chunk["errorDetail"].get("message", "")
                raise BuildError(message, iter([]))
            text = str(chunk.get("stream", "")).rstrip()
            if text:
                lines.append(text)
                if log is not None:
                    log(text)
    except (BuildError, APIError) as exc:
        tail = "\n".join(lines[-15:])
        raise ImageError(f"building {what} ({tag}) failed: {exc}\n{tail}".rstrip()) from None
    image = find_image(client, tag)
    if image is None:
        raise ImageError(f"building {what}: the engine finished but has no image {tag}\n" + "\n".join(lines[-15:]))
    return image
