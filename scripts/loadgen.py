#!/usr/bin/env python3
"""loadgen.py — load benchmark for the HTTP API (a benchmark, not a test).

N concurrent streaming clients loop on POST /v1/completions for D seconds and
count the tokens that arrive as SSE chunks. Prints aggregate tokens/s, the
request and error counts, and the worker's RSS at the start and the end.

  scripts/loadgen.py --url http://127.0.0.1:8080 --clients 64 --seconds 60 --max-tokens 64
"""
import argparse
import asyncio
import json
import subprocess
import time


def worker_rss_kb():
    try:
        pids = subprocess.run(["pgrep", "-f", "llm170-worker"], capture_output=True, text=True).stdout.split()
        total = 0
        for p in pids:
            with open("/proc/%s/status" % p) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        return total
    except OSError:
        return -1


async def one_request(host, port, body, stats):
    reader, writer = await asyncio.open_connection(host, port)
    data = json.dumps(body).encode()
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\nConnection: close\r\n\r\n" % (host.encode(), len(data)) + data)
    await writer.drain()
    status = await reader.readline()
    code = int(status.split()[1]) if len(status.split()) > 1 else 0
    tokens, done = 0, False
    async for raw in reader:
        line = raw.strip()
        if line.startswith(b"data: "):
            payload = line[6:]
            if payload == b"[DONE]":
                done = True
                break
            try:
                chunk = json.loads(payload)
            except ValueError:
                continue
            if "error" in chunk:
                break
            tokens += 1
    writer.close()
    stats["tokens"] += tokens
    stats["requests"] += 1
    if code != 200 or not done:
        stats["errors"] += 1


async def client(i, host, port, args, deadline, stats):
    n = 0
    while time.monotonic() < deadline:
        body = {"prompt": "Once upon a time %d %d" % (i, n), "max_tokens": args.max_tokens,
                "temperature": 0.8, "seed": i * 1000 + n, "stream": True}
        try:
            await one_request(host, port, body, stats)
        except (OSError, asyncio.IncompleteReadError, ValueError):
            stats["errors"] += 1
        n += 1


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--max-tokens", type=int, default=64)
    args = ap.parse_args()
    hostport = args.url.split("//", 1)[1].rstrip("/")
    host, port = hostport.split(":")
    stats = {"tokens": 0, "requests": 0, "errors": 0}
    rss0 = worker_rss_kb()
    t0 = time.monotonic()
    deadline = t0 + args.seconds
    await asyncio.gather(*(client(i, host, int(port), args, deadline, stats) for i in range(args.clients)))
    dt = time.monotonic() - t0
    rss1 = worker_rss_kb()
    print("clients %d, %.1f s: %d requests, %d errors, %d tokens, %.1f tokens/s; worker RSS %d -> %d kB" % (
        args.clients, dt, stats["requests"], stats["errors"], stats["tokens"], stats["tokens"] / dt, rss0, rss1))


if __name__ == "__main__":
    asyncio.run(main())
