"""No registered secret reaches a log record, whichever logger made it and at whatever level.

The scrubber sits where every record is made (logging's record factory), so no list of
logger names can miss one: a vendor SDK that starts logging through a new HTTP stack
(openai and anthropic moved to httpx2/httpcore2) is covered before anyone knows its name.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from coreagent_sdk._scrub import REDACTED, register

from .canary import CANARY

ROOT = Path(__file__).resolve().parent.parent

# A fresh process: logging at DEBUG from the start, a loopback model server that echoes the
# key it was sent in a response header (as a hostile or careless server may), one call.
_PROBE = textwrap.dedent(
    """
    import asyncio, json, logging, os, sys, threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    VENDOR, KEY = sys.argv[1], os.environ["PROBE_KEY"]

    class Echo(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers.get("content-length", 0)))
            if VENDOR == "openai":
                body = {"id": "c", "object": "chat.completion", "created": 0, "model": "m",
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": "hi"}}]}
            else:
                body = {"id": "c", "type": "message", "role": "assistant", "model": "m",
                        "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn",
                        "usage": {"input_tokens": 1, "output_tokens": 1}}
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("x-request-id", KEY)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    logging.basicConfig(level=logging.DEBUG, stream=sys.stdout, format="%(name)s %(message)s")

    async def main():
        from coreagent_sdk.models import AnthropicModel, Message, OpenAIChatModel

        if VENDOR == "openai":
            model = OpenAIChatModel("m", base_url=url + "/v1", api_key_env="PROBE_KEY")
        else:
            model = AnthropicModel("m", base_url=url, api_key_env="PROBE_KEY")
        async with model:
            reply = await model.complete([Message(role="user", text="hello")], [])
        print("REPLY", reply.text)

    try:
        asyncio.run(main())
    finally:
        server.shutdown()
    """
)


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
def test_a_key_a_server_echoes_in_a_header_is_in_no_debug_log_line_of_a_fresh_process(
    vendor: str,
) -> None:
    pytest.importorskip(vendor)
    env = {**os.environ, "PROBE_KEY": CANARY, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, vendor],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "REPLY hi" in out
    # The vendor's HTTP stack did log the response headers at DEBUG (else this proves nothing),
    # and the header's value in them is redacted.
    headers = [line for line in out.splitlines() if "x-request-id" in line]
    assert headers, out[-3000:]
    assert all(REDACTED in line for line in headers), headers
    assert CANARY not in out


def test_a_logger_first_made_after_the_secret_logs_it_redacted(caplog) -> None:
    register(CANARY)
    caplog.set_level(logging.DEBUG)
    # No name list could know this logger: it is made here, after the registration.
    logger = logging.getLogger("a.dependency.nobody.named.yet")
    logger.debug("response headers: %r", [(b"x-request-id", CANARY.encode())])
    message = caplog.records[-1].getMessage()
    assert CANARY not in message and REDACTED in message


def test_a_secret_in_a_logged_exception_is_redacted_in_the_formatted_record(caplog) -> None:
    register(CANARY)
    caplog.set_level(logging.DEBUG)
    try:
        raise RuntimeError(f"the server said: bad key {CANARY}")
    except RuntimeError:
        logging.getLogger("another.dependency").exception("request failed")
    formatted = logging.Formatter().format(caplog.records[-1])
    assert "request failed" in formatted and "RuntimeError" in formatted
    assert CANARY not in formatted and REDACTED in formatted


def test_a_record_factory_a_user_set_before_the_secret_is_kept_and_scrubbed_over(
    caplog, monkeypatch
) -> None:
    made: list[str] = []
    plain = logging.LogRecord

    def users_factory(*args: object, **kwargs: object) -> logging.LogRecord:
        record = plain(*args, **kwargs)  # type: ignore[arg-type]
        made.append(record.name)
        return record

    monkeypatch.setattr(logging, "_logRecordFactory", users_factory)  # undone after the test
    register(CANARY)  # a registration finds the factory in place, and builds over it
    caplog.set_level(logging.INFO)
    logging.getLogger("their.app").info("token=%s", CANARY)
    assert made[-1] == "their.app"  # their factory still made the record
    assert caplog.records[-1].getMessage() == f"token={REDACTED}"


def test_a_record_with_no_secret_keeps_its_message_and_its_arguments(caplog) -> None:
    register(CANARY)
    caplog.set_level(logging.INFO)
    logging.getLogger("plain").info("%d peers at %s", 3, "hub")
    record = caplog.records[-1]
    assert record.msg == "%d peers at %s" and record.args == (3, "hub")
