"""The world server's default port (`worldfactory serve --transport http`).

Not 8000: that is where the usual model server listens (vLLM's `--port 8000`, the README's
`--base-url http://127.0.0.1:8000/v1`), and an RL set-up runs both on one machine. Container
images keep 8000 inside the container (worldfactory/images), where nothing else listens.
"""

SERVE_PORT = 8100
