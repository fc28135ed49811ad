"""The benchmarks' fake upstream process: what the real SDK reads from it, how it paces a
reply, and the chunk log the benchmarks time deliveries against."""

from __future__ import annotations

import http.client
import itertools
import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.support.fake_openai_server import tokens

ROOT = Path(__file__).resolve().parents[2]
TOKENS, RATE, FIRST_DELAY = 8, 40.0, 0.1


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    chunk_log = tmp_path / "chunks.jsonl"
    command = [sys.executable, "-m", "tests.support.fake_openai_server", "--port", "0"]
    command += ["--tokens", str(TOKENS), "--tokens-per-second", str(RATE)]
    command += ["--first-token-delay", str(FIRST_DELAY), "--chunk-log", str(chunk_log)]
    errors = (tmp_path / "stderr.txt").open("w")
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=errors, text=True)
    try:
        line = process.stdout.readline() if process.stdout else ""
        assert line.startswith("listening "), line
        yield line.split()[1], chunk_log
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0  # a clean stop on SIGTERM
        errors.close()
    assert (tmp_path / "stderr.txt").read_text() == ""  # no request ended in an error


def sdk_reply(base_url: str, content: str) -> str:
    client = openai.OpenAI(api_key="bench", base_url=base_url, max_retries=0)
    stream = client.chat.completions.create(
        model="fake-model", messages=[{"role": "user", "content": content}], stream=True
    )
    return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)


def test_the_sdk_streams_the_whole_reply_paced_and_logged(server: tuple[str, Path]) -> None:
    base_url, chunk_log = server
    client = openai.OpenAI(api_key="bench", base_url=base_url, max_retries=0)
    asked = time.time()
    stream = client.chat.completions.create(
        model="fake-model",
        messages=[{"role": "user", "content": "bench key 42"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    text, finish, usage = [], None, None
    for chunk in stream:
        if chunk.choices:
            text.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
        usage = chunk.usage or usage
    assert "".join(text) == "".join(tokens(TOKENS))
    assert finish == "stop"
    assert usage is not None
    assert usage.completion_tokens == TOKENS

    entry = json.loads(chunk_log.read_text().splitlines()[-1])
    assert entry["user"] == "bench key 42"
    assert asked <= entry["received_at"] <= time.time()
    sent = [(text, at) for kind, text, at in entry["chunks"] if kind == "text"]
    assert [text for text, _ in sent] == tokens(TOKENS)
    # The first token after the delay, the rest at the rate (a sleep is never early).
    assert sent[0][1] - entry["received_at"] >= FIRST_DELAY
    gaps = [b - a for (_, a), (_, b) in itertools.pairwise(sent)]
    assert min(gaps) > 0.5 / RATE
    assert sent[-1][1] - sent[0][1] >= (TOKENS - 1) / RATE - 0.01


def test_unknown_paths_bad_json_and_unstreamed_requests_are_refused(
    server: tuple[str, Path],
) -> None:
    base_url, chunk_log = server
    for path, body in (("/embeddings", b'{"input": "x"}'), ("/chat/completions", b"{not json")):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(base_url + path, data=body), timeout=5)
        assert refused.value.code == 404
        assert json.load(refused.value)["error"]["type"] == "invalid_request_error"
    client = openai.OpenAI(api_key="bench", base_url=base_url, max_retries=0)
    with pytest.raises(openai.BadRequestError, match="only answers streamed requests"):
        client.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "hi"}]
        )
    assert not chunk_log.exists() or chunk_log.read_text() == ""  # nothing was streamed


def test_a_client_leaving_mid_reply_ends_only_its_own_reply(server: tuple[str, Path]) -> None:
    base_url, chunk_log = server
    port = int(base_url.rsplit(":", 1)[1].split("/")[0])
    body = json.dumps({"stream": True, "messages": [{"role": "user", "content": "leaves"}]})
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    connection.request("POST", "/v1/chat/completions", body=body)
    response = connection.getresponse()
    assert response.status == 200
    assert response.read1(64).startswith(b"data: ")  # the reply had begun
    connection.close()

    assert sdk_reply(base_url, "stays") == "".join(tokens(TOKENS))
    time.sleep(2 * TOKENS / RATE)  # past the end the left reply would have had
    logged = [json.loads(line)["user"] for line in chunk_log.read_text().splitlines()]
    assert logged == ["stays"]  # the left reply is not logged as sent
