#!/usr/bin/env python3
"""test_server_responses: OpenAI's /v1/responses (split from test_server_e2e.py, issue 33 item
6): the response object, its named and numbered stream events carrying the same text, message
items with input_text/output_text parts, and each refused field naming itself. kogpt2d on
127.0.0.1 with a small random model (lib.make_model: 2 layers, 64 wide, n_ctx 128, the default
model's 12,000-id SentencePiece tokenizer), one daemon for the file.
Exit 0 pass, 1 fail, 77 skip."""
import json
import sys

import test_server_lib as lib
from test_server_lib import check, expect_error, post


def sse_typed(data):
    """(event name, data JSON) of each event of an SSE body, in order."""
    out = []
    for block in data.decode("utf-8").split("\n\n"):
        lines = block.split("\n")
        name = [x[7:] for x in lines if x.startswith("event: ")]
        body = [x[6:] for x in lines if x.startswith("data: ")]
        if body:
            out.append((name[0] if name else None, json.loads(body[0])))
    return out


def test_responses(d):
    """POST /v1/responses: OpenAI's Responses API for text, whole and streamed."""
    body = {"input": "안녕하세요", "max_output_tokens": 8, "temperature": 0.8, "seed": 3,
            "instructions": "친절하게"}
    r = post(d, "/v1/responses", body)
    msg = r["output"][0] if r.get("output") else {}
    part = (msg.get("content") or [{}])[0]
    u = r.get("usage") or {}
    check(r.get("object") == "response" and r["id"].startswith("resp_") and
          r["status"] in ("completed", "incomplete") and r["model"] == "model" and
          r["instructions"] == "친절하게" and r["max_output_tokens"] == 8 and
          msg.get("type") == "message" and msg["id"].startswith("msg_") and
          msg["role"] == "assistant" and msg["status"] == r["status"] and
          part.get("type") == "output_text" and part.get("annotations") == [] and
          u.get("total_tokens") == u.get("input_tokens", 0) + u.get("output_tokens", 0) and
          0 < u["output_tokens"] <= 8 and "cached_tokens" in u["input_tokens_details"],
          "response object shape %r" % r)
    check((r["status"] == "incomplete") == (r["incomplete_details"] == {
        "reason": "max_output_tokens"}) and (r["status"] == "incomplete") == (
        u.get("output_tokens") == 8), "incomplete_details when max_output_tokens cut it: %r" % r)
    st, hdrs, data = d.request("POST", "/v1/responses", dict(body, stream=True))
    ev = sse_typed(data)
    types = [e[1].get("type") for e in ev]
    n_delta = types.count("response.output_text.delta")
    last = "response.incomplete" if r["status"] == "incomplete" else "response.completed"
    want = (["response.created", "response.in_progress", "response.output_item.added",
             "response.content_part.added"] + ["response.output_text.delta"] * n_delta +
            ["response.output_text.done", "response.content_part.done",
             "response.output_item.done", last])
    check(st == 200 and hdrs.get("content-type") == "text/event-stream; charset=utf-8" and
          types == want and all(name == e["type"] for name, e in ev) and
          [e["sequence_number"] for _, e in ev] == list(range(len(ev))),
          "responses stream: OpenAI's events in order, named, numbered: %r" % types)
    if types == want:
        text = "".join(e["delta"] for _, e in ev if e["type"] == "response.output_text.delta")
        final = ev[-1][1]["response"]
        check(ev[0][1]["response"]["status"] == "in_progress" and
              ev[0][1]["response"]["output"] == [] and ev[2][1]["item"]["content"] == [] and
              ev[3][1]["part"] == {"type": "output_text", "text": "", "annotations": []} and
              text == part["text"] and ev[-4][1]["text"] == text and
              ev[-3][1]["part"]["text"] == text and ev[-2][1]["item"]["content"][0]["text"] ==
              text and final["output"][0]["content"][0]["text"] == text and
              final["usage"]["output_tokens"] == u["output_tokens"] and
              all(e["item_id"] == ev[2][1]["item"]["id"] for _, e in ev[3:-2]),
              "responses stream: the same text as whole, in the deltas and the done events")
    parts = {"input": [{"type": "message", "role": "user",
                        "content": [{"type": "input_text", "text": "안녕"}]},
                       {"role": "assistant", "content": [{"type": "output_text", "text": "네"}]},
                       {"role": "user", "content": "하세요"}], "max_output_tokens": 4}
    check(post(d, "/v1/responses", parts)["usage"]["input_tokens"] > 3,
          "responses: messages with input_text / output_text parts")
    for bad, status, param, what in (
            ({}, 400, "input", "no input"),
            ({"input": []}, 422, "input", "an empty input"),
            ({"input": 5}, 400, "input", "input a number"),
            ({"input": "a", "instructions": 5}, 400, "instructions", "instructions a number"),
            ({"input": [{"type": "function_call_output", "call_id": "x", "output": "y"}]}, 422,
             "input", "a function_call_output item"),
            ({"input": [{"role": "user", "content": [{"type": "input_image"}]}]}, 422, "input",
             "an image part"),
            ({"input": "a", "tools": [{"type": "function", "name": "f"}]}, 422, "tools",
             "tools"),
            ({"input": "a", "previous_response_id": "resp_x"}, 422, "previous_response_id",
             "previous_response_id"),
            ({"input": "a", "text": {"format": {"type": "json_schema"}}}, 422, "text",
             "text.format json_schema"),
            ({"input": "a", "max_output_tokens": 0}, 422, "max_output_tokens",
             "max_output_tokens 0"),
            ({"input": "a", "model": "gpt-4.1"}, 404, "model", "another model")):
        expect_error(d, "POST", "/v1/responses", bad, status, "responses: " + what, param=param)


def main():
    tmp, model_dir, d = lib.start("kg_responses_")
    return lib.run_tests([("responses", lambda: test_responses(d))], daemons=[d], tmp=tmp)


if __name__ == "__main__":
    sys.exit(main())
