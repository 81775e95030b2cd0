#!/usr/bin/env python3
"""Bounded loopback load test for `tensorfold serve`: C concurrent clients x R requests each (chat and completions,
greedy and seeded sampled), zero failures required; prints p50/p99 latency, aggregate completion tok/s, the server's
RSS after each repetition (memory must not grow), and checks every reply's token_sha against the same request sent
alone. Standard library only. Usage: tools/load_test.py --url http://127.0.0.1:PORT --pid PID [--clients 64]
[--requests 8] [--repeats 3] [--max-tokens 16]"""
import argparse, concurrent.futures as cf, http.client, json, statistics, sys, time, urllib.parse


def post(url, path, body, timeout=600):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        conn.request("POST", path, json.dumps(body), {"content-type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, json.loads(data) if data else None
    finally:
        conn.close()


def request_for(client, i, max_tokens):
    kind = (client + i) % 4
    seed = 1000 + client * 37 + i
    if kind < 2:
        body = {"messages": [{"role": "user", "content": f"Write function number {client}-{i} in Python."}],
                "max_tokens": max_tokens, "temperature": 0 if kind == 0 else 0.8, "seed": seed}
        return "/v1/chat/completions", body
    body = {"prompt": f"def helper_{client}_{i}(values):\n", "max_tokens": max_tokens,
            "temperature": 0 if kind == 2 else 0.7, "top_p": 0.9, "seed": seed, "ignore_eos": True}
    return "/v1/completions", body


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None


def one(url, client, i, max_tokens):
    path, body = request_for(client, i, max_tokens)
    t = time.perf_counter()
    status, reply = post(url, path, body)
    dt = time.perf_counter() - t
    if status != 200:
        return None, dt, (path, body), f"HTTP {status}: {reply}"
    return reply, dt, (path, body), None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--pid", type=int)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--alone-sample", type=int, default=24, help="replies re-sent alone to compare token_sha")
    a = ap.parse_args()
    failures, rss = 0, []
    for rep in range(a.repeats):
        start = time.perf_counter()
        results = []
        with cf.ThreadPoolExecutor(a.clients) as pool:
            futs = [pool.submit(lambda c=c: [one(a.url, c, i, a.max_tokens) for i in range(a.requests)])
                    for c in range(a.clients)]
            for f in futs:
                results.extend(f.result())
        wall = time.perf_counter() - start
        errs = [e for _, _, _, e in results if e]
        failures += len(errs)
        lat = sorted(dt for r, dt, _, e in results if not e)
        toks = sum(r["usage"]["completion_tokens"] for r, _, _, e in results if not e)
        p50 = statistics.median(lat) if lat else float("nan")
        p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else float("nan")
        rss.append(rss_kib(a.pid) if a.pid else None)
        print(f"repeat {rep + 1}: {len(results)} requests, {len(errs)} failed, p50 {p50:.2f} s, p99 {p99:.2f} s, "
              f"{toks} tokens in {wall:.1f} s = {toks / wall:.1f} tok/s aggregate, server RSS {rss[-1]} KiB")
        for e in errs[:5]:
            print("  error:", e)
    # concurrent == alone, on a sample of the last repetition's replies.
    diffs = 0
    for reply, _, (path, body), err in results[: a.alone_sample]:
        if err:
            continue
        status, alone = post(a.url, path, body)
        if status != 200 or alone["tensorfold"]["token_sha"] != reply["tensorfold"]["token_sha"]:
            diffs += 1
            print("  concurrent != alone:", path, body.get("seed"), reply["tensorfold"], alone and alone.get("tensorfold"))
    print(f"concurrent vs alone: {a.alone_sample - diffs}/{a.alone_sample} equal")
    growth = (rss[-1] - rss[1]) if len(rss) > 2 and rss[1] and rss[-1] else None
    print(f"RSS growth from repeat 2 to {len(rss)}: {growth} KiB")
    sys.exit(1 if failures or diffs else 0)


if __name__ == "__main__":
    main()
