#!/usr/bin/env python3
r"""Resident memory of a node after a workload that uses every model it runs.

    cargo build --release --offline -p engram-node
    python3 tests/scripts/node_memory.py                          # the shipped configuration
    python3 tests/scripts/node_memory.py --set inference.enabled=false
    python3 tests/scripts/node_memory.py --set distillation.model=false --set reranker.enabled=false
    python3 tests/scripts/node_memory.py --env GLIBC_TUNABLES=glibc.malloc.arena_max=2

Starts `target/release/engram-node` (or `--engram-bin`) on a temporary SQLite store with
`cluster.toml` (or `--engram-config`), each `--set section.key=value` given to it as its
`ENGRAM__SECTION__KEY` variable and each `--env KEY=VALUE` added to its environment. Then:
1. writes `--turns` turns (default 200) of the first LoCoMo conversations (`--data`, else
   `ENGRAM_EVAL_DATA`, else `../shared/data` beside the repository), one user a conversation,
   from 4 clients, and waits until every turn is embedded;
2. when the node distils with the model, waits (at most `--distil-wait` seconds) until the
   model has loaded and the distillation queue is empty, so the decoder has decoded batches;
3. asks `--questions` fresh questions of the conversations: searches and contexts at 1 and 8
   clients, then searches with `"rerank": true` at 1 and 4 clients;
4. waits `--idle` seconds and prints VmRSS (now) and VmHWM (peak) of the node from
   `/proc/<pid>/status`, with the largest VmRSS seen in each phase (sampled every 0.2 s).

No memory text is printed. It is a measurement, not a test.
"""
import argparse
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import http.client

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE = os.environ.get('ENGRAM_CACHE') or os.path.expanduser('~/.cache/engram')


def fail(message):
    sys.stderr.write('node_memory: %s\n' % message)
    sys.exit(2)


def engram_env():
    """This environment plus `$ENGRAM_CACHE/env` (libtorch's libraries for the node)."""
    env = dict(os.environ)
    script = os.path.join(CACHE, 'env')
    if os.path.exists(script):
        out = subprocess.run(['bash', '-c', 'source "$1" && env -0', 'env', script],
                             capture_output=True, check=True).stdout
        for item in out.split(b'\0'):
            if b'=' in item:
                k, v = item.split(b'=', 1)
                env[k.decode()] = v.decode()
    return env


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def status_fields(pid):
    """The memory fields of `/proc/<pid>/status` (VmRSS, VmHWM, RssAnon, RssFile...) in bytes."""
    fields = {}
    with open('/proc/%d/status' % pid) as f:
        for line in f:
            key, _, value = line.partition(':')
            if key.startswith('Vm') or key.startswith('Rss'):
                fields[key] = int(value.split()[0]) * 1024
    return fields


def status(pid):
    """VmRSS and VmHWM in bytes."""
    fields = status_fields(pid)
    return fields.get('VmRSS', 0), fields.get('VmHWM', 0)


class Http:
    def __init__(self, port, key):
        self.conn = http.client.HTTPConnection('127.0.0.1', port, timeout=300)
        self.key = key

    def call(self, method, path, body=None, raw=False):
        headers = {'content-type': 'application/json'}
        if self.key:
            headers['authorization'] = 'Bearer ' + self.key
        self.conn.request(method, path, json.dumps(body) if body is not None else None, headers)
        r = self.conn.getresponse()
        data = r.read()
        if r.status >= 300:
            raise RuntimeError('%s %s: %d' % (method, path, r.status))
        if raw:
            return data.decode()
        return json.loads(data) if data else None


def user_path(user):
    return re.sub(r'[^A-Za-z0-9_.-]', '-', user)


def load_locomo(path, turns):
    texts, questions = [], []
    for conv in json.load(open(path)):
        if len(texts) >= turns:
            break
        user, c = conv['sample_id'], conv['conversation']
        n = 1
        while 'session_%d' % n in c and len(texts) < turns:
            date = c.get('session_%d_date_time' % n, '')
            for turn in c['session_%d' % n][:turns - len(texts)]:
                texts.append((user, 's%d' % n, '[%s] %s: %s' % (date, turn['speaker'], turn['text'])))
            n += 1
        questions += [(user, q['question']) for q in conv['qa'] if q.get('question')]
    seen, fresh = set(), []
    for user, q in questions:
        key = ' '.join(q.lower().split())
        if key not in seen:
            seen.add(key)
            fresh.append((user, q))
    return texts, fresh


def closed_loop(items, clients, make_call):
    work = list(items)
    lock = threading.Lock()
    errors = []

    def run():
        call = make_call()
        while True:
            with lock:
                if not work:
                    return
                item = work.pop()
            try:
                call(item)
            except Exception as e:  # noqa: BLE001 - counted, not fatal
                errors.append(str(e))

    threads = [threading.Thread(target=run) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def largest_mappings(pid):
    """(resident KiB, name) of each mapping of `pid`, the largest first; anonymous ones
    named by their size."""
    out, name = [], None
    with open('/proc/%d/smaps' % pid) as f:
        for line in f:
            parts = line.split()
            if re.match(r'^[0-9a-f]+-[0-9a-f]+ ', line):
                lo, hi = (int(x, 16) for x in parts[0].split('-'))
                name = parts[5] if len(parts) > 5 else '[anon %.1f MB]' % ((hi - lo) / 1e6)
            elif parts[0] == 'Rss:':
                out.append((int(parts[1]), name))
    return sorted(out, reverse=True)


def resident_by_file(pid):
    """(resident KiB, file) summed over each file's mappings, the largest first."""
    totals = {}
    for rss_kb, name in largest_mappings(pid):
        if not name.startswith('['):
            totals[name] = totals.get(name, 0) + rss_kb
    return sorted(((v, k) for k, v in totals.items()), reverse=True)


def metric(text, name):
    total, found = 0.0, False
    for line in text.splitlines():
        if line.startswith(name + ' ') or line.startswith(name + '{'):
            total += float(line.rsplit(' ', 1)[1])
            found = True
    return total if found else None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--engram-bin')
    p.add_argument('--engram-config', default=os.path.join(REPO, 'cluster.toml'))
    p.add_argument('--set', action='append', default=[], metavar='SECTION.KEY=VALUE')
    p.add_argument('--env', action='append', default=[], metavar='KEY=VALUE')
    p.add_argument('--data')
    p.add_argument('--turns', type=int, default=200)
    p.add_argument('--questions', type=int, default=40)
    p.add_argument('--distil-wait', type=float, default=900)
    p.add_argument('--idle', type=float, default=3)
    p.add_argument('--smaps', type=int, default=0, metavar='N',
                   help='also print the N largest mappings by resident size')
    args = p.parse_args()

    data = args.data or os.environ.get('ENGRAM_EVAL_DATA') or os.path.join(REPO, '..', 'shared', 'data')
    texts, questions = load_locomo(os.path.join(data, 'locomo-dev.json'), args.turns)
    binary = args.engram_bin or os.path.join(os.environ.get('CARGO_TARGET_DIR') or os.path.join(REPO, 'target'),
                                             'release', 'engram-node')

    root = tempfile.mkdtemp(prefix='engram-node-memory-')
    port = free_port()
    admin_file, cookie = os.path.join(root, 'admin.key'), os.path.join(root, 'cookie')
    for path, value in ((admin_file, secrets.token_hex(32)), (cookie, secrets.token_urlsafe(32))):
        with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), 'w') as f:
            f.write(value)
    admin = open(admin_file).read().strip()
    env = engram_env()
    for k in [k for k in env if k.startswith('ENGRAM__')]:
        del env[k]
    env.update({
        'ENGRAM__NODE__DATA_DIR': root,
        'ENGRAM__STORAGE__SQLITE__PATH': os.path.join(root, 'engram.sqlite'),
        'ENGRAM__HTTP__LISTEN': '127.0.0.1:%d' % port,
        'ENGRAM__CLUSTER__LISTEN': '127.0.0.1:%d' % free_port(),
        'ENGRAM__SECURITY__ADMIN_KEY_FILE': admin_file,
        'ENGRAM__CLUSTER__COOKIE_FILE': cookie,
        'ENGRAM__SECURITY__RATE_LIMIT': '0',
    })
    env.pop('RUST_LOG', None)
    for item in args.set:
        key, _, value = item.partition('=')
        env['ENGRAM__' + '__'.join(part.upper().replace('-', '_') for part in key.split('.'))] = value
    for item in args.env:
        key, _, value = item.partition('=')
        env[key] = value
    model = env.get('ENGRAM__DISTILLATION__MODEL', 'true') == 'true' \
        and env.get('ENGRAM__DISTILLATION__ENABLED', 'true') == 'true' \
        and env.get('ENGRAM__INFERENCE__ENABLED', 'true') == 'true'

    log = open(os.path.join(root, 'node.log'), 'w')
    node = subprocess.Popen([binary, 'run', '--config', args.engram_config], env=env,
                            stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    peaks, phase = {}, ['start']
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            try:
                rss, _ = status(node.pid)
            except OSError:
                return
            peaks[phase[0]] = max(peaks.get(phase[0], 0), rss)
            time.sleep(0.2)

    try:
        deadline = time.time() + 300
        while True:
            if node.poll() is not None:
                fail('the node exited with %s (log: %s)' % (node.returncode, log.name))
            try:
                conn = http.client.HTTPConnection('127.0.0.1', port, timeout=2)
                conn.request('GET', '/ready')
                if conn.getresponse().status == 200:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                fail('the node was not ready in 300 s')
            time.sleep(0.2)
        threading.Thread(target=sample, daemon=True).start()
        key = Http(port, admin).call('POST', '/v1/admin/keys', {'scope': 'gateway', 'name': 'node-memory'})['token']
        started = time.time()

        phase[0] = 'writes'

        def writer():
            conn = Http(port, key)
            return lambda item: conn.call('POST', '/v1/users/%s/turns' % user_path(item[1][0]), {
                'request_id': 'memory-%d' % item[0], 'session_id': item[1][1],
                'user_text': item[1][2], 'assistant_text': ''})
        errors = closed_loop(list(enumerate(texts)), 4, writer)
        while True:
            reply = Http(port, admin).call('GET', '/v1/cluster/pipeline')
            if not reply.get('enabled') or reply.get('pending_entries', 0) == 0:
                break
            time.sleep(0.5)
        print('wrote %d turns (%d errors), embedded %.0f s after start' % (len(texts), len(errors), time.time() - started))

        phase[0] = 'distillation'
        if model:
            end = time.time() + args.distil_wait
            while time.time() < end:
                m = Http(port, None).call('GET', '/metrics', raw=True)
                loaded = metric(m, 'engram_generation_model_loaded') or 0
                if loaded and phase[0] == 'distillation':
                    phase[0] = 'decoding'
                    print('decoder loaded %.0f s after start: VmRSS %.2f GiB, VmHWM %.2f GiB'
                          % ((time.time() - started,) + tuple(v / 1024.0 ** 3 for v in status(node.pid))))
                pending = metric(m, 'engram_distillation_pending_users') or 0
                depth = metric(m, 'engram_generation_queue_depth') or 0
                running = metric(m, 'engram_generation_running') or 0
                if loaded and not pending and not depth and not running:
                    break
                time.sleep(1)
            m = Http(port, None).call('GET', '/metrics', raw=True)
            print('distillation: model loaded %s, %s answers, %s summaries, %s tokens, %s pending users, %.0f s after start'
                  % (metric(m, 'engram_generation_model_loaded'), metric(m, 'engram_distillation_model_answers_total'),
                     metric(m, 'engram_distillation_summaries_total'), metric(m, 'engram_generation_tokens_total'),
                     metric(m, 'engram_distillation_pending_users'), time.time() - started))

        phase[0] = 'reads'
        asked = questions[:args.questions]
        quarter = max(1, len(asked) // 4)
        parts = [asked[i * quarter:(i + 1) * quarter] for i in range(4)]

        def search(rerank):
            def make():
                conn = Http(port, key)
                return lambda q: conn.call('POST', '/v1/users/%s/memories/search' % user_path(q[0]),
                                           {'query': q[1], 'k': 10, 'rerank': rerank})
            return make

        def context():
            conn = Http(port, key)
            return lambda q: conn.call('POST', '/v1/users/%s/context' % user_path(q[0]),
                                       {'session_id': 'memory', 'query': q[1]})
        errors = []
        errors += closed_loop(parts[0], 1, search(False))
        errors += closed_loop(parts[1], 8, search(False))
        errors += closed_loop(parts[0] + parts[1], 8, context)
        errors += closed_loop(parts[2], 1, search(True))
        errors += closed_loop(parts[3], 4, search(True))
        print('asked %d questions (%d errors)' % (len(asked), len(errors)))
        phase[0] = 'idle'
        time.sleep(args.idle)
        rss, hwm = status(node.pid)
        gib = 1024.0 ** 3
        print('phases, largest VmRSS: ' + ', '.join('%s %.2f GiB' % (k, v / gib) for k, v in peaks.items()))
        print('VmRSS %.2f GiB (%.0f MB), VmHWM %.2f GiB (%.0f MB)' % (rss / gib, rss / 1e6, hwm / gib, hwm / 1e6))
        ticks = os.sysconf('SC_CLK_TCK')
        with open('/proc/%d/stat' % node.pid) as f:
            fields = f.read().rsplit(')', 1)[1].split()
        print('node CPU time: user %.0f s, system %.0f s' % (int(fields[11]) / ticks, int(fields[12]) / ticks))
        fields = status_fields(node.pid)
        print('of VmRSS: anonymous %.0f MB, files %.0f MB, shared memory %.0f MB'
              % tuple(fields.get(k, 0) / 1e6 for k in ('RssAnon', 'RssFile', 'RssShmem')))
        if args.smaps:
            print('largest mappings (resident MB, name):')
            for rss_kb, name in largest_mappings(node.pid)[:args.smaps]:
                print('  %8.1f  %s' % (rss_kb / 1024.0, name))
            print('files by resident MB, all their mappings together:')
            for rss_kb, name in resident_by_file(node.pid)[:args.smaps]:
                print('  %8.1f  %s' % (rss_kb / 1024.0, name))
    finally:
        stop.set()
        node.terminate()
        try:
            node.wait(30)
        except subprocess.TimeoutExpired:
            node.kill()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == '__main__':
    main()
