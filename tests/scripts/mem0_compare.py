#!/usr/bin/env python3
r"""Fresh-question latency, side by side with Mem0 OSS on the same texts and questions.

    cargo build --release --offline -p engram-node
    python3 tests/scripts/mem0_compare.py                       # LoCoMo from ENGRAM_EVAL_DATA
    python3 tests/scripts/mem0_compare.py --texts T.jsonl --questions Q.jsonl
    python3 tests/scripts/mem0_compare.py --questions-per-level 100 --concurrency 1,8,32

The first run makes a virtual environment of its own under `$ENGRAM_CACHE/mem0-venv`
(`ENGRAM_CACHE` defaults to ~/.cache/engram) with the pinned packages below from PyPI, and
reruns itself in it. No model hub is asked: Mem0's `huggingface` embedder is pointed at the
all-MiniLM-L6-v2 that `.ci/models` installs (`$ENGRAM_CACHE/models/all-minilm-l6-v2`), made
into a local sentence-transformers directory beside it in the cache (mean pooling,
normalised, as the published model).

What it does:
1. Texts and questions: every turn of each LoCoMo conversation of the evaluation data
   directory (`--data`, else `ENGRAM_EVAL_DATA`, else `../shared/data` beside the
   repository: `locomo-dev.json`), as `[session date] speaker: text`, one user a
   conversation, and the conversations' questions (each asked of its conversation's user);
   or `--texts FILE` and `--questions FILE`: JSON lines `{"user", "session", "text"}` and
   `{"user", "question"}` (a plain line is a text of user `user-1`, or a question of the
   texts' one user).
2. Adds the texts to Mem0 (`Memory.add(..., infer=False)`: no LLM; MiniLM, FAISS, in this
   process) and to an Engram node it starts (`target/release/engram-node`, or
   `--engram-bin`) on a temporary SQLite store with the shipped configuration
   (`cluster.toml`, or `--engram-config FILE`) through `POST /v1/users/{user}/turns`; then
   waits until the node has embedded every turn (`--settle`, seconds; the distiller goes
   on in the background, as it does on a node in service).
3. At each `--concurrency` level (default 1, 8 and 32 clients, each one request at a time)
   asks `--questions-per-level` questions (default 100) never asked before in the run of
   Mem0's `search`, of Engram's search (`POST /v1/users/{user}/memories/search`) and of its
   context (`POST /v1/users/{user}/context`, other questions again: a question asked twice
   would be answered by the node's query cache). Mem0 and Engram's search get the same
   questions. A few questions outside the measured ones warm each system up first.
4. Prints per level and endpoint p50/p99 and Engram / Mem0 ratios, the share of Engram's
   answers ranked with their question's vector (the replies' `fallback` says why not), the
   tokens a second the node's distiller decoded in the background while Engram's questions
   of the level ran (`engram_generation_tokens_total`), and the resident memory (VmRSS now, VmHWM peak, from /proc) of the Engram node and of this
   process, which holds Mem0 (its encoder, FAISS, its SQLite history).

Both systems share the machine with this script's clients. It is a benchmark, not a test.
"""
import argparse
import hashlib
import json
import os
import queue
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

# Exact versions this script was run with (PyPI); torch comes with sentence-transformers.
PINS = [
    'mem0ai==2.2.1',
    'faiss-cpu==1.15.1',
    'sentence-transformers==6.3.0',
    'transformers==5.25.0',
    'torch==2.15.0',
]

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE = os.environ.get('ENGRAM_CACHE') or os.path.expanduser('~/.cache/engram')
VENV = os.path.join(CACHE, 'mem0-venv')
MINILM = os.path.join(CACHE, 'models', 'all-minilm-l6-v2')


def fail(message):
    sys.stderr.write('mem0_compare: %s\n' % message)
    sys.exit(2)


# ---------------------------------------------------------------------------------------
# The virtual environment


def ensure_venv():
    """Reruns this script in its own virtual environment, making it first when missing."""
    if os.path.realpath(sys.prefix) == os.path.realpath(VENV):
        return
    python = os.path.join(VENV, 'bin', 'python')
    stamp = os.path.join(VENV, 'engram-pins.txt')
    wanted = '\n'.join(PINS) + '\n'
    have = open(stamp).read() if os.path.exists(stamp) else None
    if have != wanted:
        if not os.path.exists(python):
            print('making %s' % VENV, file=sys.stderr)
            subprocess.run([sys.executable, '-m', 'venv', VENV], check=True)
        print('installing %s into %s (PyPI)' % (' '.join(PINS), VENV), file=sys.stderr)
        done = subprocess.run([python, '-m', 'pip', 'install', '--quiet'] + PINS)
        if done.returncode != 0:
            fail('pip could not install %s into %s (is PyPI reachable?)' % (' '.join(PINS), VENV))
        with open(stamp, 'w') as f:
            f.write(wanted)
    os.execv(python, [python, os.path.abspath(__file__)] + sys.argv[1:])


def local_minilm():
    """A sentence-transformers directory for the installed all-MiniLM-L6-v2, written beside
    it in the cache from the model's own files (nothing is downloaded)."""
    need = ['config.json', 'model.safetensors', 'tokenizer.json']
    missing = [n for n in need if not os.path.exists(os.path.join(MINILM, n))]
    if missing:
        fail('%s lacks %s: run .ci/models to install all-MiniLM-L6-v2'
             % (MINILM, ', '.join(missing)))
    st = os.path.join(CACHE, 'mem0-compare', 'all-minilm-l6-v2-sentence-transformers')
    os.makedirs(os.path.join(st, '1_Pooling'), exist_ok=True)
    for name in need:
        link = os.path.join(st, name)
        if not os.path.exists(link):
            os.symlink(os.path.join(MINILM, name), link)
    files = {
        'modules.json': [
            {'idx': 0, 'name': '0', 'path': '', 'type': 'sentence_transformers.models.Transformer'},
            {'idx': 1, 'name': '1', 'path': '1_Pooling', 'type': 'sentence_transformers.models.Pooling'},
            {'idx': 2, 'name': '2', 'path': '2_Normalize', 'type': 'sentence_transformers.models.Normalize'},
        ],
        'sentence_bert_config.json': {'max_seq_length': 256, 'do_lower_case': False},
        'tokenizer_config.json': {'tokenizer_class': 'BertTokenizer', 'do_lower_case': True,
                                  'model_max_length': 512},
        '1_Pooling/config.json': {'word_embedding_dimension': 384, 'pooling_mode_mean_tokens': True},
    }
    for name, value in files.items():
        with open(os.path.join(st, name), 'w') as f:
            json.dump(value, f)
    os.makedirs(os.path.join(st, '2_Normalize'), exist_ok=True)
    return st


# ---------------------------------------------------------------------------------------
# Texts and questions


def eval_data_dir(given):
    if given:
        return given, '--data'
    if os.environ.get('ENGRAM_EVAL_DATA'):
        return os.environ['ENGRAM_EVAL_DATA'], 'ENGRAM_EVAL_DATA'
    return os.path.join(REPO, '..', 'shared', 'data'), 'the default, ../shared/data beside the repository'


def load_locomo(path, max_conversations):
    """(texts, questions): texts `(user, session, text)`, questions `(user, question)`."""
    texts, questions = [], []
    for conv in json.load(open(path))[:max_conversations]:
        user, c = conv['sample_id'], conv['conversation']
        n = 1
        while 'session_%d' % n in c:
            date = c.get('session_%d_date_time' % n, '')
            for turn in c['session_%d' % n]:
                texts.append((user, 's%d' % n, '[%s] %s: %s' % (date, turn['speaker'], turn['text'])))
            n += 1
        questions += [(user, q['question']) for q in conv['qa'] if q.get('question')]
    return texts, questions


def read_lines(path, kind):
    rows = []
    for number, line in enumerate(open(path, encoding='utf-8'), 1):
        line = line.strip()
        if not line:
            continue
        if line.startswith('{'):
            try:
                row = json.loads(line)
            except ValueError as e:
                fail('%s line %d: %s' % (path, number, e))
        else:
            row = {kind: line}
        if not row.get(kind):
            fail('%s line %d has no "%s"' % (path, number, kind))
        rows.append(row)
    return rows


def load_files(texts_path, questions_path):
    texts = [(r.get('user', 'user-1'), r.get('session', 's1'), r['text'])
             for r in read_lines(texts_path, 'text')]
    users = {t[0] for t in texts}
    questions = []
    for r in read_lines(questions_path, 'question'):
        if 'user' not in r and len(users) > 1:
            fail('%s: a question without "user", and the texts are of %d users' % (questions_path, len(users)))
        user = r.get('user') or next(iter(users))
        if user not in users:
            fail('%s: question for user %r, who has no text in %s' % (questions_path, user, texts_path))
        questions.append((user, r['question']))
    return texts, questions


def distinct(questions):
    """Each question text once (a repeated text would not be fresh the second time)."""
    seen, out = set(), []
    for user, q in questions:
        key = ' '.join(q.lower().split())
        if key not in seen:
            seen.add(key)
            out.append((user, q))
    return out


# ---------------------------------------------------------------------------------------
# Engram


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


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


def target_dir():
    try:
        out = subprocess.run(['cargo', 'metadata', '--format-version', '1', '--no-deps', '--offline'],
                             cwd=REPO, capture_output=True, check=True, env=engram_env()).stdout
        return json.loads(out)['target_directory']
    except (OSError, subprocess.CalledProcessError, ValueError):
        return os.path.join(REPO, 'target')


class Http:
    """One keep-alive connection (one per client thread)."""

    def __init__(self, port, key):
        self.conn = http.client.HTTPConnection('127.0.0.1', port, timeout=120)
        self.key = key

    def call(self, method, path, body=None):
        headers = {'content-type': 'application/json'}
        if self.key:
            headers['authorization'] = 'Bearer ' + self.key
        self.conn.request(method, path, json.dumps(body) if body is not None else None, headers)
        r = self.conn.getresponse()
        data = r.read()
        if r.status >= 300:
            raise RuntimeError('%s %s: %d %s' % (method, path, r.status, data[:300]))
        return json.loads(data) if data else None


class Engram:
    def __init__(self, binary, config):
        self.dir = tempfile.mkdtemp(prefix='engram-mem0-compare-')
        self.port = free_port()
        admin = os.path.join(self.dir, 'admin.key')
        cookie = os.path.join(self.dir, 'cookie')
        for path, value in ((admin, secrets.token_hex(32)), (cookie, secrets.token_urlsafe(32))):
            with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), 'w') as f:
                f.write(value)
        self.admin = open(admin).read().strip()
        env = engram_env()
        for k in [k for k in env if k.startswith('ENGRAM__')]:
            del env[k]
        env.update({
            'ENGRAM__NODE__DATA_DIR': self.dir,
            'ENGRAM__STORAGE__SQLITE__PATH': os.path.join(self.dir, 'engram.sqlite'),
            'ENGRAM__HTTP__LISTEN': '127.0.0.1:%d' % self.port,
            'ENGRAM__CLUSTER__LISTEN': '127.0.0.1:%d' % free_port(),
            'ENGRAM__SECURITY__ADMIN_KEY_FILE': admin,
            'ENGRAM__CLUSTER__COOKIE_FILE': cookie,
            # The load comes from one client address: the per-key rate limit stays out.
            'ENGRAM__SECURITY__RATE_LIMIT': '0',
        })
        env.pop('RUST_LOG', None)
        self.log = open(os.path.join(self.dir, 'node.log'), 'w')
        self.process = subprocess.Popen([binary, 'run', '--config', config], env=env,
                                        stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        deadline = time.time() + 300
        while True:
            if self.process.poll() is not None:
                fail('the Engram node exited with %s; its log:\n%s' % (self.process.returncode, self.tail()))
            try:
                conn = http.client.HTTPConnection('127.0.0.1', self.port, timeout=2)
                conn.request('GET', '/ready')
                if conn.getresponse().status == 200:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                fail('the Engram node was not ready in 300 s; its log:\n%s' % self.tail())
            time.sleep(0.2)
        made = Http(self.port, self.admin).call('POST', '/v1/admin/keys', {'scope': 'gateway', 'name': 'mem0-compare'})
        self.key = made['token']

    def tail(self):
        self.log.flush()
        return ''.join(open(self.log.name, errors='replace').readlines()[-30:])

    def client(self):
        return Http(self.port, self.key)

    def generated_tokens(self):
        """The distiller's tokens so far (`engram_generation_tokens_total`), 0 without it."""
        conn = http.client.HTTPConnection('127.0.0.1', self.port, timeout=30)
        conn.request('GET', '/metrics')
        total = 0.0
        for line in conn.getresponse().read().decode().splitlines():
            if line.startswith('engram_generation_tokens_total'):
                total += float(line.rsplit(' ', 1)[1])
        return total

    def pending(self):
        reply = Http(self.port, self.admin).call('GET', '/v1/cluster/pipeline')
        return reply.get('pending_entries', 0) if reply.get('enabled') else 0

    def stop(self):
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def user_path(user):
    return re.sub(r'[^A-Za-z0-9_.-]', '-', user)


# ---------------------------------------------------------------------------------------
# Mem0


def start_mem0(store_dir, minilm):
    os.environ.setdefault('MEM0_TELEMETRY', 'False')
    os.environ['HF_HUB_OFFLINE'] = '1'
    os.environ['TRANSFORMERS_OFFLINE'] = '1'
    # Mem0 makes its default LLM client (OpenAI) at start; add(infer=False) and search never
    # call it, and nothing here has a key: a placeholder lets the client be made.
    os.environ.setdefault('OPENAI_API_KEY', 'unused-no-llm-is-called')
    try:
        from mem0 import Memory
    except ImportError as e:
        fail('mem0 is not importable in %s: %s' % (sys.prefix, e))
    config = {
        'embedder': {'provider': 'huggingface', 'config': {'model': minilm, 'embedding_dims': 384}},
        'vector_store': {'provider': 'faiss', 'config': {
            'collection_name': 'compare', 'path': os.path.join(store_dir, 'faiss'),
            'embedding_model_dims': 384, 'distance_strategy': 'cosine'}},
        'history_db_path': os.path.join(store_dir, 'history.db'),
    }
    return Memory.from_config(config)


def mem0_hits(reply):
    return reply.get('results', reply) if isinstance(reply, dict) else reply


# ---------------------------------------------------------------------------------------
# Measuring


def percentile(sorted_ms, p):
    if not sorted_ms:
        return float('nan')
    return sorted_ms[min(len(sorted_ms) - 1, int(round((len(sorted_ms) - 1) * p)))]


def closed_loop(items, clients, make_worker):
    """Runs `items` through `clients` threads, each one request at a time; returns each
    request's (milliseconds, result) and the wall time."""
    work = queue.Queue()
    for item in items:
        work.put(item)
    results, errors = [], []
    lock = threading.Lock()

    def run():
        ask = make_worker()
        while True:
            try:
                item = work.get_nowait()
            except queue.Empty:
                return
            started = time.perf_counter()
            try:
                out = ask(item)
            except Exception as e:  # noqa: BLE001 - reported below, the run goes on
                with lock:
                    errors.append(repr(e)[:200])
                continue
            took = (time.perf_counter() - started) * 1000
            with lock:
                results.append((took, out))

    threads = [threading.Thread(target=run) for _ in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        fail('%d of %d requests failed, e.g. %s' % (len(errors), len(items), errors[0]))
    return results, time.perf_counter() - started


def rss(pid):
    fields = {}
    for line in open('/proc/%d/status' % pid):
        key, _, value = line.partition(':')
        if key in ('VmRSS', 'VmHWM'):
            fields[key] = int(value.split()[0]) / 1024 / 1024
    return fields.get('VmRSS', float('nan')), fields.get('VmHWM', float('nan'))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--data', help='evaluation data directory (locomo-dev.json)')
    ap.add_argument('--texts', help='JSON lines {"user", "session", "text"} (with --questions)')
    ap.add_argument('--questions', help='JSON lines {"user", "question"} (with --texts)')
    ap.add_argument('--max-conversations', type=int, default=None, help='LoCoMo: the first N')
    ap.add_argument('--questions-per-level', type=int, default=100)
    ap.add_argument('--concurrency', default='1,8,32', help='comma-separated client counts')
    ap.add_argument('--warmup', type=int, default=5, help='questions outside the measured ones')
    ap.add_argument('--k', type=int, default=10, help='hits a search asks for')
    ap.add_argument('--engram-bin', help='default: target/release/engram-node')
    ap.add_argument('--engram-config', help="default: the repository's cluster.toml")
    ap.add_argument('--settle', type=float, default=900,
                    help='seconds to wait at most for Engram to embed every turn')
    ap.add_argument('--add-clients', type=int, default=8, help='concurrent Engram writes')
    args = ap.parse_args()
    levels = [int(c) for c in args.concurrency.split(',') if c.strip()]
    if not levels or min(levels) < 1:
        fail('--concurrency %r: expected positive numbers, e.g. 1,8,32' % args.concurrency)

    if bool(args.texts) != bool(args.questions):
        fail('--texts and --questions go together')
    if args.texts:
        texts, questions = load_files(args.texts, args.questions)
        source = '%s, %s' % (args.texts, args.questions)
    else:
        data, how = eval_data_dir(args.data)
        path = os.path.join(data, 'locomo-dev.json')
        if not os.path.exists(path):
            fail('%s is not there (data directory from %s): pass --data DIR, set ENGRAM_EVAL_DATA, '
                 'or give --texts and --questions' % (path, how))
        texts, questions = load_locomo(path, args.max_conversations)
        source = path
    questions = distinct(questions)
    per_level = args.questions_per_level
    needed = args.warmup + len(levels) * 2 * per_level
    if len(questions) < needed:
        fail('%d distinct questions, %d needed (%d warm-up + %d levels x 2 endpoints x %d): '
             'give more questions or fewer a level' % (len(questions), needed, args.warmup,
                                                       len(levels), per_level))
    # A fixed shuffle, so each level mixes the users' questions.
    questions.sort(key=lambda q: hashlib.sha256(q[1].encode()).hexdigest())

    binary = args.engram_bin or os.path.join(target_dir(), 'release', 'engram-node')
    if not os.access(binary, os.X_OK):
        fail('no Engram node at %s: cargo build --release --offline -p engram-node '
             '(or --engram-bin PATH)' % binary)
    config = args.engram_config or os.path.join(REPO, 'cluster.toml')
    if not os.path.exists(config):
        fail('no configuration at %s' % config)
    minilm = local_minilm()

    import importlib.metadata as md
    versions = ', '.join('%s %s' % (p, md.version(p)) for p in ('mem0ai', 'faiss-cpu', 'sentence-transformers', 'torch'))
    users = sorted({t[0] for t in texts})
    print('## Engram and Mem0 on fresh questions\n')
    print('texts %d of %d users, %d distinct questions, from %s' % (len(texts), len(users), len(questions), source))
    print('Engram: %s, %s; Mem0: %s, all-MiniLM-L6-v2 (local), FAISS, add(infer=False)'
          % (binary, config, versions))
    print('%d CPUs; clients are threads of this process, which also holds Mem0\n' % os.cpu_count())

    store = tempfile.mkdtemp(prefix='mem0-compare-')
    engram = None
    try:
        engram = Engram(binary, config)
        memory = start_mem0(store, minilm)

        started = time.perf_counter()
        for i, (user, session, text) in enumerate(texts):
            memory.add([{'role': 'user', 'content': text}], user_id=user, infer=False,
                       metadata={'session': session})
        mem0_add = time.perf_counter() - started

        def writer():
            conn = engram.client()
            return lambda item: conn.call('POST', '/v1/users/%s/turns' % user_path(item[1][0]), {
                'request_id': 'compare-%d' % item[0], 'session_id': item[1][1],
                'user_text': item[1][2], 'assistant_text': ''})
        _, engram_add = closed_loop(list(enumerate(texts)), args.add_clients, writer)
        print('added %d texts: Mem0 %.1f s (one at a time, each embedded before it returns), '
              'Engram %.1f s (%d clients; embedded after the commit)'
              % (len(texts), mem0_add, engram_add, args.add_clients))
        waited = time.perf_counter()
        while engram.pending() > 0 and time.perf_counter() - waited < args.settle:
            time.sleep(1)
        left = engram.pending()
        print('Engram embedded every turn %.1f s after the last add%s\n'
              % (time.perf_counter() - waited,
                 '' if left == 0 else ' -- NOT: %d still pending after --settle' % left))

        def mem0_search():
            return lambda q: mem0_hits(memory.search(q[1], top_k=args.k, filters={'user_id': q[0]}))

        def engram_search():
            conn = engram.client()
            return lambda q: conn.call('POST', '/v1/users/%s/memories/search' % user_path(q[0]),
                                       {'query': q[1], 'k': args.k})

        def engram_context():
            conn = engram.client()
            return lambda q: conn.call('POST', '/v1/users/%s/context' % user_path(q[0]),
                                       {'session_id': 'compare', 'query': q[1]})

        warm, rest = questions[:args.warmup], questions[args.warmup:]
        closed_loop(warm, 1, mem0_search)
        closed_loop(warm, 1, engram_search)

        rows = []
        for n, clients in enumerate(levels):
            asked = rest[2 * n * per_level:(2 * n + 2) * per_level]
            searched, contexts = asked[:per_level], asked[per_level:]
            m, _ = closed_loop(searched, clients, mem0_search)
            tokens, began = engram.generated_tokens(), time.perf_counter()
            s, _ = closed_loop(searched, clients, engram_search)
            c, _ = closed_loop(contexts, clients, engram_context)
            decoded = (engram.generated_tokens() - tokens) / (time.perf_counter() - began)
            rows.append((clients, m, s, c, decoded))

        def stats(results):
            ms = sorted(r[0] for r in results)
            return percentile(ms, 0.5), percentile(ms, 0.99)

        def with_vector(results, flag):
            reasons = {}
            for _, reply in results:
                if reply.get('fallback'):
                    reasons[reply['fallback']] = reasons.get(reply['fallback'], 0) + 1
            ranked = sum(1 for _, reply in results if reply.get(flag) is True and not reply.get('fallback'))
            return 100.0 * ranked / len(results), reasons

        print('| clients | Mem0 search p50 / p99 | Engram search p50 / p99 | Engram / Mem0 (p50, p99) '
              '| Engram context p50 / p99 | context / Mem0 search (p50, p99) | ranked with vector: search, context '
              '| without it (why) | distiller tokens/s during them |')
        print('|---:|---:|---:|---:|---:|---:|---:|---|---:|')
        for clients, m, s, c, decoded in rows:
            (m50, m99), (s50, s99), (c50, c99) = stats(m), stats(s), stats(c)
            sv, sr = with_vector(s, 'embedded')
            cv, cr = with_vector(c, 'query_embedded')
            why = {k: sr.get(k, 0) + cr.get(k, 0) for k in set(sr) | set(cr)}
            print('| %d | %.1f / %.1f ms | %.1f / %.1f ms | %.2f, %.2f | %.1f / %.1f ms | %.2f, %.2f '
                  '| %.0f%%, %.0f%% | %s | %.1f |' % (
                      clients, m50, m99, s50, s99, s50 / m50, s99 / m99, c50, c99, c50 / m50, c99 / m99,
                      sv, cv, ', '.join('%s %d' % kv for kv in sorted(why.items())) or 'none', decoded))
        node_now, node_peak = rss(engram.process.pid)
        mem0_now, mem0_peak = rss(os.getpid())
        print('\nresident memory after the run (now / peak): Engram node %.2f / %.2f GiB; '
              'Mem0 (this process) %.2f / %.2f GiB' % (node_now, node_peak, mem0_now, mem0_peak))
        print('(%d questions a level and endpoint, each asked once in the run; p99 is the value at '
              'rank round(0.99 (n - 1)) of the n sorted latencies)' % per_level)
    finally:
        if engram:
            engram.stop()
        shutil.rmtree(store, ignore_errors=True)


if __name__ == '__main__':
    ensure_venv()
    main()
