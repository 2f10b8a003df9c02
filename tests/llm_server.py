"""A small OpenAI-compatible chat-completions server on loopback, for tests (no model, no network).

The scripted model reads the tools offered in each request and the conversation so far, and
answers with the next call of the task's oracle plan, one call per turn, then a final message
with the answer. With `wrong_rate` it sometimes calls a tool on the wrong record. Modes
`malformed` (tool-call arguments that are not JSON) and `error500` (HTTP 500 on every request)
exercise the client's failure handling. Usage is counted like a real server does.
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


class LLMServer:
    """`with LLMServer(model) as url:` serves /v1/chat/completions on 127.0.0.1 until the block ends."""

    def __init__(self, model: ScriptedModel) -> None:
        self.model = model
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length))
                if self.path.rstrip("/") != "/v1/chat/completions":
                    status, out = 404, {"error": {"message": f"no route {self.path}"}}
                else:
                    status, out = outer.model.reply(body)
                raw = json.dumps(out).encode()
                self.send_response(status)
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
