#!/usr/bin/env python3
r"""Search latency at 1,000 turns a user, through the HTTP gateway (the target: search
p99 without the query's embedding under 10 ms at 1,000 turns a user).

Writes the first 1,000 turns of LoCoMo's tuning conversations (conv-26, 30 and 41, each turn
`[session date] speaker: text` in its session) as one user's turns, then asks every question
of those conversations (categories 1-4) `--passes` times in turn, one search at a time over
one keep-alive connection (`POST /v1/users/{user}/memories/search`, k = 20). It prints the
client's p50 and p99 per pass, and the node's own histogram for the search route
(`engram_http_request_seconds`): how many searches took longer than each bound. Standard
library only. Against a node with inference off on a fresh store (release build):

    D=$(mktemp -d); (umask 077; head -c 32 /dev/urandom | base64 > $D/cookie; \
      od -An -N32 -tx1 /dev/urandom | tr -d ' \n' > $D/admin.key)
    ENGRAM__NODE__DATA_DIR=$D ENGRAM__HTTP__LISTEN=127.0.0.1:18080 \
      ENGRAM__CLUSTER__LISTEN=127.0.0.1:17000 ENGRAM__SECURITY__ADMIN_KEY_FILE=$D/admin.key \
      ENGRAM__INFERENCE__ENABLED=false target/release/engram-node run --config cluster.toml &
    python3 tests/scripts/search_latency.py --admin-key $D/admin.key
"""
import argparse
import http.client
import json
import time

ROUTE = '/v1/users/{user}/memories/search'


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--host', default='127.0.0.1')
    ap.add_argument('--port', type=int, default=18080)
    ap.add_argument('--admin-key', required=True, help='file holding the root admin key')
    ap.add_argument('--data', default='../shared/data/locomo-dev.json')
    ap.add_argument('--turns', type=int, default=1000)
    ap.add_argument('--passes', type=int, default=4)
    ap.add_argument('--mode', default='hybrid', choices=['hybrid', 'bm25', 'dense'])
    args = ap.parse_args()
    conn = http.client.HTTPConnection(args.host, args.port)

    def call(method, path, body, key):
        headers = {'content-type': 'application/json'}
        if key:
            headers['authorization'] = 'Bearer ' + key
        conn.request(method, path, json.dumps(body) if body is not None else None, headers)
        r = conn.getresponse()
        data = r.read()
        if r.status >= 300:
            raise SystemExit('%s %s: %d %s' % (method, path, r.status, data[:300]))
        return data

    admin = open(args.admin_key).read().strip()
    key = json.loads(call('POST', '/v1/admin/keys', {'scope': 'gateway', 'name': 'bench'}, admin))['token']
    turns, questions = [], []
    for conv in json.load(open(args.data))[:3]:
        c = conv['conversation']
        n = 1
        while 'session_%d' % n in c:
            date = c['session_%d_date_time' % n]
            for t in c['session_%d' % n]:
                turns.append(('%s-s%d' % (conv['sample_id'], n), '[%s] %s: %s' % (date, t['speaker'], t['text'])))
            n += 1
        questions += [q['question'] for q in conv['qa'] if q.get('category') in (1, 2, 3, 4)]
    turns = turns[:args.turns]
    started = time.time()
    for i, (session, text) in enumerate(turns):
        body = {'request_id': 'r%d' % i, 'session_id': session, 'user_text': text, 'assistant_text': ''}
        call('POST', '/v1/users/bench-user/turns', body, key)
    print('%d turns written in %.1f s; %d questions, %d passes, mode %s'
          % (len(turns), time.time() - started, len(questions), args.passes, args.mode))
    for n in range(args.passes):
        took = []
        for q in questions:
            s = time.perf_counter()
            call('POST', '/v1/users/bench-user/memories/search', {'query': q, 'k': 20, 'mode': args.mode}, key)
            took.append((time.perf_counter() - s) * 1000)
        took.sort()
        print('pass %d, as the client sees it: p50 %.2f ms, p99 %.2f ms, max %.2f ms'
              % (n + 1, took[len(took) // 2], took[int(len(took) * 0.99)], took[-1]))
    buckets = []
    for line in call('GET', '/metrics', None, None).decode().splitlines():
        if line.startswith('engram_http_request_seconds_bucket{') and 'route="%s"' % ROUTE in line:
            bound = line.split('le="')[1].split('"')[0]
            buckets.append((bound, int(float(line.rsplit(' ', 1)[1]))))
    total = dict(buckets).get('+Inf', 0)
    print('the node, searches longer than: ' + ', '.join(
        '%s s: %d' % (b, total - n) for b, n in buckets if b in ('0.001', '0.0025', '0.005', '0.01', '0.025'))
        + ' (of %d)' % total)


if __name__ == '__main__':
    main()
