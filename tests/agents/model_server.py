#!/usr/bin/env python3
"""A scripted model server for the agent tests: it speaks enough of the
Anthropic Messages API, of the Gemini API and of the OpenAI Responses API
for the real Claude Code, Gemini CLI and Codex CLI to run a fixed scenario
of tool calls, offline.

Each prompt of the scenario carries a marker "(scenario prompt N)". A request
whose tools include the agent's shell tool is a step of the main loop: the
server finds the newest user message holding a marker, counts the model's
replies since then, and answers with that step of prompt N. Any other
request (titles, topic checks, token counts) gets a short text answer.

When prompt N's first step is asked for, the agent has already run its
prompt hook and is waiting for the answer, so nothing writes to the
workspace: the server copies it to SNAPSHOTS/pN then, the state the
prompt's checkpoint must show.

Usage: model_server.py --api anthropic|gemini|openai --workspace DIR --snapshots DIR --port-file FILE [--log FILE]
"""

import argparse
import json
import os
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MARKER = re.compile(r"\(scenario prompt (\d+)\)")

BUILD = (
    "mkdir -p build/obj && seq 1 300 | while read i; do echo \"object $i\" > build/obj/o$i.o; done"
    " && echo linked > build/app.bin"
    " && git init -q && git add -A && git -c user.email=agent@example.invalid -c user.name=agent commit -qm build"
)

# What the model does for each prompt, one list entry per model reply.
# Each reply is a list of actions; a reply with no tool action ends the prompt.
SCENARIO = {
    1: [
        [("write", "app.py", "def greet():\n    return 'hello v1'\n"), ("write", "notes/todo.md", "- build\n- ship\n")],
        [("bash", BUILD)],
        [("text", "Built the app.")],
    ],
    2: [
        [("read", "app.py")],
        [("edit", "app.py", "hello v1", "hello v2")],
        [("bash", "rm -rf build && rm old.txt && echo 'second' > notes/log.txt"
                  " && git add -A && git -c user.email=agent@example.invalid -c user.name=agent commit -qm two")],
        [("text", "Changed the greeting and cleaned the build.")],
    ],
    3: [
        [("bash", "mkdir -p dist && cp app.py dist/ && chmod 600 dist/app.py && ln -s dist/app.py current")],
        [("text", "Packaged.")],
    ],
}

LOCK = threading.Lock()
ARGS = None


def log(msg):
    if ARGS.log:
        with open(ARGS.log, "a") as f:
            f.write(msg + "\n")


def snapshot(n):
    dst = os.path.join(ARGS.snapshots, f"p{n}")
    with LOCK:
        if os.path.exists(dst):
            return
        tmp = dst + ".tmp"
        subprocess.run(["cp", "-a", os.path.join(ARGS.workspace, "."), tmp], check=True)
        os.rename(tmp, dst)
        log(f"snapshot p{n}")


def step_of(turns):
    """turns: [(role, text_or_None)] oldest first. -> (prompt, step) or None."""
    for i in range(len(turns) - 1, -1, -1):
        role, text = turns[i]
        if role == "user" and text:
            m = MARKER.search(text)
            if m:
                replies = sum(1 for r, _ in turns[i + 1:] if r == "model")
                return int(m.group(1)), replies
    return None


def actions_for(prompt, step):
    replies = SCENARIO.get(prompt, [])
    if step < len(replies):
        return replies[step]
    return [("text", "Nothing more to do.")]


def scripted(api, turns, main_loop):
    """The actions answering a request: the scenario's next step for a
    request of the agent's main loop (it offers the shell tool), else a
    short text."""
    where = step_of(turns) if main_loop else None
    if not where:
        return [("text", "ok")]
    prompt, step = where
    if step == 0:
        snapshot(prompt)
    actions = actions_for(prompt, step)
    log(f"{api} prompt {prompt} step {step}: {[a[0] for a in actions]}")
    return actions


# ---------------------------------------------------------------- Anthropic

def anthropic_turns(body):
    out = []
    for m in body.get("messages", []):
        role = "model" if m.get("role") == "assistant" else "user"
        c = m.get("content")
        if isinstance(c, str):
            out.append((role, c))
            continue
        texts = [b.get("text", "") for b in c or [] if b.get("type") == "text"]
        out.append((role, "\n".join(texts) if texts else None))
    return out


def anthropic_blocks(actions, seq):
    blocks = []
    for k, a in enumerate(actions):
        kind = a[0]
        tid = f"toolu_{seq}_{k}"
        path = lambda p: os.path.join(ARGS.workspace, p)
        if kind == "text":
            blocks.append({"type": "text", "text": a[1]})
        elif kind == "write":
            blocks.append({"type": "tool_use", "id": tid, "name": "Write",
                           "input": {"file_path": path(a[1]), "content": a[2]}})
        elif kind == "read":
            blocks.append({"type": "tool_use", "id": tid, "name": "Read", "input": {"file_path": path(a[1])}})
        elif kind == "edit":
            blocks.append({"type": "tool_use", "id": tid, "name": "Edit",
                           "input": {"file_path": path(a[1]), "old_string": a[2], "new_string": a[3]}})
        elif kind == "bash":
            blocks.append({"type": "tool_use", "id": tid, "name": "Bash",
                           "input": {"command": a[1], "description": "scenario step"}})
    return blocks


SEQ = [0]


def anthropic_reply(body):
    tools = [t.get("name") for t in body.get("tools") or []]
    actions = scripted("anthropic", anthropic_turns(body), "Bash" in tools)
    with LOCK:
        SEQ[0] += 1
        seq = SEQ[0]
    blocks = anthropic_blocks(actions, seq)
    stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    msg = {"id": f"msg_{seq}", "type": "message", "role": "assistant", "model": body.get("model", "scripted"),
           "content": blocks, "stop_reason": stop, "stop_sequence": None,
           "usage": {"input_tokens": 10, "output_tokens": 10}}
    return msg


def sse(event, data):
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def anthropic_stream(msg):
    head = dict(msg, content=[], stop_reason=None)
    out = [sse("message_start", {"type": "message_start", "message": head})]
    for i, b in enumerate(msg["content"]):
        if b["type"] == "text":
            out.append(sse("content_block_start", {"type": "content_block_start", "index": i,
                                                   "content_block": {"type": "text", "text": ""}}))
            out.append(sse("content_block_delta", {"type": "content_block_delta", "index": i,
                                                   "delta": {"type": "text_delta", "text": b["text"]}}))
        else:
            start = dict(b, input={})
            out.append(sse("content_block_start", {"type": "content_block_start", "index": i, "content_block": start}))
            out.append(sse("content_block_delta", {"type": "content_block_delta", "index": i,
                                                   "delta": {"type": "input_json_delta",
                                                             "partial_json": json.dumps(b["input"])}}))
        out.append(sse("content_block_stop", {"type": "content_block_stop", "index": i}))
    out.append(sse("message_delta", {"type": "message_delta",
                                     "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": None},
                                     "usage": {"output_tokens": 10}}))
    out.append(sse("message_stop", {"type": "message_stop"}))
    return b"".join(out)


# ---------------------------------------------------------------- Gemini

def gemini_turns(body):
    out = []
    for c in body.get("contents", []):
        role = "model" if c.get("role") == "model" else "user"
        texts = [p["text"] for p in c.get("parts", []) if isinstance(p.get("text"), str)]
        out.append((role, "\n".join(texts) if texts else None))
    return out


def gemini_parts(actions):
    parts = []
    for a in actions:
        kind = a[0]
        path = lambda p: os.path.join(ARGS.workspace, p)
        if kind == "text":
            parts.append({"text": a[1]})
        elif kind == "write":
            parts.append({"functionCall": {"name": "write_file", "args": {"file_path": path(a[1]), "content": a[2]}}})
        elif kind == "read":
            parts.append({"functionCall": {"name": "read_file", "args": {"absolute_path": path(a[1]),
                                                                         "file_path": path(a[1])}}})
        elif kind == "edit":
            parts.append({"functionCall": {"name": "replace", "args": {
                "file_path": path(a[1]), "old_string": a[2], "new_string": a[3], "instruction": "scenario step"}}})
        elif kind == "bash":
            parts.append({"functionCall": {"name": "run_shell_command",
                                           "args": {"command": a[1], "description": "scenario step"}}})
    return parts


def gemini_reply(body):
    names = []
    for t in body.get("tools") or []:
        names += [f.get("name") for f in t.get("functionDeclarations") or []]
    actions = scripted("gemini", gemini_turns(body), "run_shell_command" in names)
    if os.environ.get("MODEL_SERVER_DEBUG"):
        log("gemini request contents: " + json.dumps(body.get("contents", [])[-1:])[:3000])
    return {"candidates": [{"content": {"role": "model", "parts": gemini_parts(actions)}, "finishReason": "STOP",
                            "index": 0}],
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 10, "totalTokenCount": 20},
            "modelVersion": "scripted"}


# ---------------------------------------------------------------- OpenAI Responses (Codex)

def item_text(item):
    c = item.get("content")
    if isinstance(c, str):
        return c
    return "\n".join(p.get("text", "") for p in c or [] if isinstance(p.get("text"), str))


def openai_step(body):
    """(prompt, step) of a Responses request: the newest user message with a
    marker, and the step after the newest of our own calls since then (their
    call ids say which step made them)."""
    items = body.get("input") or []
    for i in range(len(items) - 1, -1, -1):
        it = items[i]
        if it.get("type", "message") == "message" and it.get("role") == "user":
            m = MARKER.search(item_text(it))
            if m:
                prompt, step = int(m.group(1)), 0
                for later in items[i + 1:]:
                    cid = MARKER_CALL.match(later.get("call_id") or "")
                    if cid and int(cid.group(1)) == prompt:
                        step = max(step, int(cid.group(2)) + 1)
                return prompt, step
    return None


MARKER_CALL = re.compile(r"call_p(\d+)_s(\d+)_")


def patch_of(action):
    kind = action[0]
    if kind == "write":
        body = "".join("+" + line + "\n" for line in action[2].splitlines())
        return f"*** Begin Patch\n*** Add File: {action[1]}\n{body}*** End Patch\n"
    old, new = action[2], action[3]
    with open(os.path.join(ARGS.workspace, action[1])) as f:
        lines = f.read().splitlines()
    hunk = "".join((f"-{l}\n+{l.replace(old, new)}\n" if old in l else f" {l}\n") for l in lines)
    return f"*** Begin Patch\n*** Update File: {action[1]}\n@@\n{hunk}*** End Patch\n"


def openai_items(actions, tools, prompt, step):
    """Codex's tools by what this version offers: a shell tool taking a
    string (exec_command, shell_command) or an argv (shell), and apply_patch
    as a freeform (custom) tool or a function."""
    items = []
    for k, a in enumerate(actions):
        kind = a[0]
        cid = f"call_p{prompt}_s{step}_{k}"
        if kind == "text":
            items.append({"type": "message", "role": "assistant", "id": f"msg_{cid}",
                          "content": [{"type": "output_text", "text": a[1], "annotations": []}]})
            continue
        if kind in ("write", "edit") and "apply_patch" in tools:
            patch = patch_of(a)
            if tools["apply_patch"] == "custom":
                items.append({"type": "custom_tool_call", "id": f"ctc_{cid}", "call_id": cid, "name": "apply_patch",
                              "input": patch, "status": "completed"})
            else:
                items.append({"type": "function_call", "id": f"fc_{cid}", "call_id": cid, "name": "apply_patch",
                              "arguments": json.dumps({"input": patch})})
            continue
        command = a[1] if kind == "bash" else f"cat {a[1]}"
        # Codex refuses `rm -f` style commands by a built-in rule, bypass
        # flags or not ("rm -f style commands are not permitted"): the same
        # recursive removal, without -f.
        command = command.replace("rm -rf ", "rm -r ")
        if "exec_command" in tools:
            name, args = "exec_command", {"cmd": command, "workdir": ARGS.workspace}
        elif "shell_command" in tools:
            name, args = "shell_command", {"command": command, "workdir": ARGS.workspace}
        else:
            name, args = "shell", {"command": ["bash", "-lc", command], "workdir": ARGS.workspace}
        items.append({"type": "function_call", "id": f"fc_{cid}", "call_id": cid, "name": name,
                      "arguments": json.dumps(args)})
    return items


def openai_tools(body):
    out = {}
    for t in body.get("tools") or []:
        name = t.get("name") or (t.get("function") or {}).get("name")
        if name:
            out[name] = t.get("type")
    return out


def openai_stream(body):
    tools = openai_tools(body)
    main_loop = any(t in tools for t in ("exec_command", "shell_command", "shell"))
    where = openai_step(body) if main_loop else None
    if os.environ.get("MODEL_SERVER_DEBUG"):
        log("openai request: tools " + json.dumps(tools) + " input tail " + json.dumps((body.get("input") or [])[-3:])[:3000])
    if where:
        prompt, step = where
        if step == 0:
            snapshot(prompt)
        actions = actions_for(prompt, step)
        log(f"openai prompt {prompt} step {step}: {[a[0] for a in actions]}")
    else:
        prompt, step, actions = 0, 0, [("text", "ok")]
    with LOCK:
        SEQ[0] += 1
        rid = f"resp_{SEQ[0]}"
    items = openai_items(actions, tools, prompt, step)
    events = [("response.created", {"type": "response.created", "response": {"id": rid}})]
    for n, it in enumerate(items):
        events.append(("response.output_item.done", {"type": "response.output_item.done", "output_index": n,
                                                      "item": it}))
    usage = {"input_tokens": 10, "input_tokens_details": None, "output_tokens": 10,
             "output_tokens_details": None, "total_tokens": 20}
    events.append(("response.completed", {"type": "response.completed", "response": {"id": rid, "usage": usage}}))
    return b"".join(sse(e, d) for e, d in events)


# ---------------------------------------------------------------- HTTP

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *a):
        log("http " + (fmt % a))

    def send(self, code, body, ctype="application/json"):
        self.send_response(code)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_HEAD(self):
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_GET(self):
        if ARGS.api == "openai":
            return self.send(200, b'{"models": [], "data": [], "object": "list"}')
        self.send(200, b"{}")

    def do_POST(self):
        n = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(n)
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        path = self.path
        try:
            if ARGS.api == "openai":
                if path.rstrip("/").endswith("/models") or "/models?" in path:
                    return self.send(200, b'{"models": [], "data": []}')
                return self.send(200, openai_stream(body), "text/event-stream")
            if ARGS.api == "anthropic":
                if "count_tokens" in path:
                    return self.send(200, b'{"input_tokens": 10}')
                msg = anthropic_reply(body)
                if body.get("stream"):
                    return self.send(200, anthropic_stream(msg), "text/event-stream")
                return self.send(200, json.dumps(msg).encode())
            if ":countTokens" in path:
                return self.send(200, b'{"totalTokens": 10}')
            if ":embedContent" in path or ":batchEmbedContents" in path:
                return self.send(200, b'{"embeddings": []}')
            reply = gemini_reply(body)
            if ":streamGenerateContent" in path:
                return self.send(200, f"data: {json.dumps(reply)}\r\n\r\n".encode(), "text/event-stream")
            return self.send(200, json.dumps(reply).encode())
        except Exception as e:  # a broken scenario must show in the test's output, not hang the agent
            log(f"error on {path}: {e!r}")
            return self.send(500, json.dumps({"error": {"message": repr(e)}}).encode())


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--api", choices=["anthropic", "gemini", "openai"], required=True)
    p.add_argument("--workspace", required=True)
    p.add_argument("--snapshots", required=True)
    p.add_argument("--port-file", required=True)
    p.add_argument("--log")
    # Codex takes its provider's address from its config: a fixed port
    # (the server runs in a network namespace of its own).
    p.add_argument("--port", type=int, default=0)
    ARGS = p.parse_args()
    srv = ThreadingHTTPServer(("127.0.0.1", ARGS.port), Handler)
    with open(ARGS.port_file + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(ARGS.port_file + ".tmp", ARGS.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
