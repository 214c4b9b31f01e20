#!/usr/bin/env python3
r"""Fresh questions at one client on a node whose distiller decodes, beside the same node without it.

    cargo build --release --offline -p engram-node
    python3 tests/scripts/busy_questions.py
    python3 tests/scripts/busy_questions.py --rounds 3 --questions 95 --max-conversations 2

For each configuration, in turn in one run (the shipped `cluster.toml`, or `--engram-config`,
then the same with `[distillation] model = false`), starts `target/release/engram-node` (or
`--engram-bin`) on a temporary SQLite store, writes every turn of the first LoCoMo
conversations (`--data`, else `ENGRAM_EVAL_DATA`, else `../shared/data`; one user a
conversation, 8 clients), waits until every turn is embedded and, with the model on, until the
decoder has loaded (the node then distils the turns in the background, as a node in service
does after a burst of writes). Then `--rounds` times: `--questions` searches by meaning, one
at a time, each question never asked before in the run, then the same questions again (the
node's query cache answers those: the node's own path without the embedding). Prints per
round the p50 / p90 of both, the answers ranked without their vector, and the decoder's steps
and prefill tokens meanwhile (`engram_generation_steps_total`,
`engram_generation_prompt_tokens_total`), so a round tells whether the distiller was at work.

What it shows: how much a question's embedding slows while the distiller shares the cores
(its weights stream through the caches the encoder's need). No memory text is printed. It is a
measurement, not a test.
"""
import argparse
import hashlib
import http.client
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mem0_compare as mc  # noqa: E402  (the node, the data and the closed loop)


def metrics(engram, prefix='engram_generation'):
    conn = http.client.HTTPConnection('127.0.0.1', engram.port, timeout=30)
    conn.request('GET', '/metrics')
    out = {}
    for line in conn.getresponse().read().decode().splitlines():
        if line.startswith(prefix):
            key, value = line.rsplit(' ', 1)
            out[key] = out.get(key, 0.0) + float(value)
    return out


def without_model(config):
    """A copy of `config` with `[distillation] model = false`."""
    lines, section, changed = open(config).read().splitlines(True), None, 0
    for i, line in enumerate(lines):
        header = re.match(r'\s*\[([^\]]+)\]', line)
        if header:
            section = header.group(1).strip()
        elif section == 'distillation' and re.match(r'\s*model\s*=\s*true\b', line):
            lines[i], changed = 'model = false\n', changed + 1
    if changed != 1:
        mc.fail('%s: no "model = true" in its [distillation] section' % config)
    handle, path = tempfile.mkstemp(prefix='busy-questions-', suffix='.toml')
    with os.fdopen(handle, 'w') as f:
        f.write(''.join(lines))
    return path


def percentile(values, p):
    ordered = sorted(values)
    return mc.percentile(ordered, p)


def measure(label, binary, config, texts, questions, args):
    engram = mc.Engram(binary, config)
    try:
        def writer():
            conn = engram.client()
            return lambda item: conn.call('POST', '/v1/users/%s/turns' % mc.user_path(item[1][0]), {
                'request_id': 'busy-%d' % item[0], 'session_id': item[1][1],
                'user_text': item[1][2], 'assistant_text': ''})
        mc.closed_loop(list(enumerate(texts)), 8, writer)
        began = time.perf_counter()
        while engram.pending() > 0:
            if time.perf_counter() - began > args.settle:
                mc.fail('%s: turns still waiting for their embedding after %d s' % (label, args.settle))
            time.sleep(0.5)
        embedded = time.perf_counter() - began
        with_model = metrics(engram).get('engram_generation_model_loaded') is not None
        while with_model and metrics(engram).get('engram_generation_model_loaded', 0) < 1:
            if time.perf_counter() - began > args.settle:
                mc.fail('%s: the decoder had not loaded after %d s' % (label, args.settle))
            time.sleep(0.5)
        print('%s: %d turns embedded %.1f s after the last write%s' % (
            label, len(texts), embedded,
            ', decoder loaded %.1f s after' % (time.perf_counter() - began) if with_model else ''))
        conn = engram.client()

        def search(question):
            started = time.perf_counter()
            reply = conn.call('POST', '/v1/users/%s/memories/search' % mc.user_path(question[0]),
                              {'query': question[1], 'k': 10})
            return (time.perf_counter() - started) * 1000, reply

        for question in questions[:args.warmup]:
            search(question)
        rows = []
        for n in range(args.rounds):
            asked = questions[args.warmup + n * args.questions:args.warmup + (n + 1) * args.questions]
            before = metrics(engram)
            fresh = [search(q) for q in asked]
            again = [search(q) for q in asked]
            after = metrics(engram)
            moved = {k: after.get(k, 0) - before.get(k, 0)
                     for k in ('engram_generation_steps_total', 'engram_generation_prompt_tokens_total')}
            f, a = [t for t, _ in fresh], [t for t, _ in again]
            rows.append((n + 1, percentile(f, 0.5), percentile(f, 0.9), percentile(a, 0.5),
                         percentile(a, 0.9), sum(1 for _, r in fresh if r.get('fallback')),
                         moved['engram_generation_steps_total'],
                         moved['engram_generation_prompt_tokens_total']))
        return rows
    finally:
        engram.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--data', help='evaluation data directory (locomo-dev.json)')
    ap.add_argument('--max-conversations', type=int, default=2)
    ap.add_argument('--questions', type=int, default=95, help='fresh questions a round')
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--warmup', type=int, default=5)
    ap.add_argument('--engram-bin', help='default: target/release/engram-node')
    ap.add_argument('--engram-config', help="default: the repository's cluster.toml")
    ap.add_argument('--settle', type=float, default=600, help='seconds to wait at most for the node')
    args = ap.parse_args()

    data, how = mc.eval_data_dir(args.data)
    path = os.path.join(data, 'locomo-dev.json')
    if not os.path.exists(path):
        mc.fail('%s is not there (data directory from %s): pass --data DIR or set ENGRAM_EVAL_DATA'
                % (path, how))
    texts, questions = mc.load_locomo(path, args.max_conversations)
    questions = mc.distinct(questions)
    needed = args.warmup + args.rounds * args.questions
    if len(questions) < needed:
        mc.fail('%d distinct questions, %d needed: fewer --questions or --rounds, or more '
                '--max-conversations' % (len(questions), needed))
    questions.sort(key=lambda q: hashlib.sha256(q[1].encode()).hexdigest())
    binary = args.engram_bin or os.path.join(mc.target_dir(), 'release', 'engram-node')
    if not os.access(binary, os.X_OK):
        mc.fail('no Engram node at %s: cargo build --release --offline -p engram-node' % binary)
    config = args.engram_config or os.path.join(mc.REPO, 'cluster.toml')
    plain = without_model(config)
    try:
        runs = [('distiller on', config), ('distiller off', plain)]
        results = [(label, measure(label, binary, c, texts, questions, args)) for label, c in runs]
    finally:
        os.unlink(plain)
    print('\n| node | round | fresh p50 / p90 | repeated p50 / p90 | without vector | decoder steps, prompt tokens |')
    print('|---|---:|---:|---:|---:|---:|')
    for label, rows in results:
        for n, f50, f90, a50, a90, none, steps, prompt in rows:
            print('| %s | %d | %.2f / %.2f ms | %.2f / %.2f ms | %d | %d, %d |'
                  % (label, n, f50, f90, a50, a90, none, steps, prompt))
    print('\n(%d fresh questions a round, one client; %d turns of %d users, %s)'
          % (args.questions, len(texts), len({t[0] for t in texts}), path))


if __name__ == '__main__':
    main()
