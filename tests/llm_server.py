"""A small OpenAI-compatible chat-completions server on loopback, for tests (no model, no network).

The scripted model reads the tools offered in each request and the conversation so far, and
answers with the next call of the task's oracle plan, one call per turn, then a final message
with the answer. With `wrong_rate` it sometimes calls a tool on the wrong record. Modes
`malformed` (tool-call arguments that are not JSON) and `error500` (HTTP 500 on every request)
exercise the client's failure handling. Usage is counted like a real server does.

`ScriptedReplies` plays a model that drafts domain packs: it answers each request with the next
reply of its script (a pack, raw text, or an HTTP status such as 429), keeps every request body it
received, and counts usage; past the end of its script it answers 500, so a test that asks more
than it planned fails loudly.
"""

from __future__ import annotations

import json
import random
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class ScriptedModel:
    def __init__(self, plans: dict[str, tuple[list[dict[str, Any]], Any]], mode: str = "script",
                 wrong_rate: float = 0.0) -> None:
        self.plans = plans  # instruction -> (oracle calls as {"tool", "args"}, answer)
        self.mode = mode
        self.wrong_rate = wrong_rate
        self.requests = 0
        self.lock = threading.Lock()

    def reply(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.lock:
            self.requests += 1
        if self.mode == "error500":
            return 500, {"error": {"message": "the scripted server is down", "type": "server_error"}}
        messages = body["messages"]
        offered = {t["function"]["name"] for t in body.get("tools", [])}
        instruction = next(m["content"] for m in messages if m["role"] == "user")
        plan, answer = self.plans.get(instruction, ([], None))
        step = sum(1 for m in messages if m["role"] == "assistant" and m.get("tool_calls"))
        prompt_tokens = max(1, len(json.dumps(messages)) // 4)
        if step < len(plan):
            call = plan[step]
            args = dict(call["args"])
            rng = random.Random(f"{body.get('seed')}:{instruction}:{step}")
            if rng.random() < self.wrong_rate:
                ids = [k for k, v in args.items() if k.endswith("_id") and isinstance(v, int)]
                if ids:
                    args[ids[0]] += 1
            if call["tool"] not in offered:
                return 200, self._message(body, "That tool is not offered.", prompt_tokens)
            raw = "{not json" if self.mode == "malformed" else json.dumps(args)
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{step}", "type": "function", "function": {"name": call["tool"], "arguments": raw}}]}
            return 200, self._wrap(body, message, "tool_calls", prompt_tokens, 12)
        if isinstance(answer, list):
            text = ", ".join(str(a) for a in answer)
        else:
            text = str(answer) if answer is not None else "Done."
        return 200, self._message(body, text, prompt_tokens)

    def _message(self, body: dict[str, Any], text: str, prompt_tokens: int) -> dict[str, Any]:
        return self._wrap(body, {"role": "assistant", "content": text}, "stop", prompt_tokens,
                          max(1, len(text) // 4))

    @staticmethod
    def _wrap(body: dict[str, Any], message: dict[str, Any], finish: str, prompt: int, completion: int
              ) -> dict[str, Any]:
        return {"id": "chatcmpl-scripted", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "finish_reason": finish, "message": message}],
                "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                          "total_tokens": prompt + completion}}


class ScriptedReplies:
    """Replies in order: a dict (sent as JSON content), a str (sent as is) or an int (that HTTP status)."""

    def __init__(self, script: list[dict[str, Any] | str | int]) -> None:
        self.script = list(script)
        self.bodies: list[dict[str, Any]] = []  # every request received, errors included
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.lock = threading.Lock()

    @property
    def requests(self) -> int:
        return len(self.bodies)

    def reply(self, body: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, str]]:
        with self.lock:
            step = len(self.bodies)
            self.bodies.append(body)
            nxt = self.script[step] if step < len(self.script) else 500
            if isinstance(nxt, int):
                kind = "rate_limit_exceeded" if nxt == 429 else "server_error"
                return nxt, {"error": {"message": f"scripted HTTP {nxt} (request {step + 1})", "type": kind}}, \
                    {"retry-after-ms": "10"}
            content = nxt if isinstance(nxt, str) else json.dumps(nxt)
            prompt = max(1, len(json.dumps(body["messages"])) // 4)
            completion = max(1, len(content) // 4)
            self.prompt_tokens += prompt
            self.completion_tokens += completion
        out = ScriptedModel._wrap(body, {"role": "assistant", "content": content}, "stop", prompt, completion)
        return 200, out, {}


class LLMServer:
    """`with LLMServer(model) as url:` serves /v1/chat/completions on 127.0.0.1 until the block ends."""

    def __init__(self, model: ScriptedModel | ScriptedReplies) -> None:
        self.model = model
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length))
                headers: dict[str, str] = {}
                if self.path.rstrip("/") != "/v1/chat/completions":
                    status, out = 404, {"error": {"message": f"no route {self.path}"}}
                else:
                    status, out, *more = outer.model.reply(body)
                    headers = more[0] if more else {}
                raw = json.dumps(out).encode()
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
