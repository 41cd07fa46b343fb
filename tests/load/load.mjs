// load.mjs — load and soak test of recur-server on the tiny hybrid model (qwen35: attention +
// gated DeltaNet layers, so every request exercises both the KV cells and the checkpoints).
//
// N concurrent streaming clients run for D seconds against a server on 127.0.0.1, mixing
// /v1/chat/completions (the `openai` client) and /completion (fetch + SSE). A third of the
// clients abort each of their streams at a random point (before the reply, before the first
// token or after k tokens). Every choice (endpoint, prompt, length, sampler seed, abort point)
// comes from a seeded PRNG per client, so a run with the same --seed sends the same requests;
// only their interleaving depends on timing.
//
// It checks, and exits 1 when one fails:
//  - the server keeps answering: /health polled all along never fails, every request gets an
//    answer (no connection error, no HTTP error other than a 503 "busy", no stream cut short),
//    and requests complete in each tenth of the run (parts of >= 10 s in a short run);
//  - every slot comes back idle at the end (GET /slots) and nothing is left queued (/metrics);
//  - resident memory (VmRSS) after the run is within 5 % of its value after the warm-up;
//  - a greedy request (temperature 0) returns exactly the text it returned at start, with and
//    without the prompt cache;
//  - the same request (prompt, seed, length) completed twice returns the same text both times
//    (outputs do not depend on the batch they were decoded in);
//  - the server exits with status 0 on SIGTERM.
// Then it prints the figures: requests served, completed, disconnects, errors, RSS, latency.
// Latencies are wall-clock on whatever machine runs it (and include queueing for a slot: N
// clients share --slots slots): figures to read, never checked.
//
// Usage: node tests/load/load.mjs [--clients N] [--duration S] [--warmup S] [--slots N]
//        [--seed N] [--cache-ram MIB] [--verbose]
// or the environment variables RECUR_LOAD_CLIENTS, RECUR_LOAD_SECONDS, RECUR_LOAD_WARMUP,
// RECUR_LOAD_SLOTS, RECUR_LOAD_SEED, RECUR_LOAD_CACHE_RAM. RECUR_BUILD and RECUR_TESTDATA locate
// recur-server and the model (tests/load/run.sh sets them).
import { parseArgs } from 'node:util';
import { readFileSync } from 'node:fs';

const { values: opt } = parseArgs({
  options: {
    clients: { type: 'string', default: process.env.RECUR_LOAD_CLIENTS ?? '64' },
    duration: { type: 'string', default: process.env.RECUR_LOAD_SECONDS ?? '600' },
    warmup: { type: 'string', default: process.env.RECUR_LOAD_WARMUP },
    slots: { type: 'string', default: process.env.RECUR_LOAD_SLOTS ?? '8' },
    seed: { type: 'string', default: process.env.RECUR_LOAD_SEED ?? '1' },
    'cache-ram': { type: 'string', default: process.env.RECUR_LOAD_CACHE_RAM ?? '32' },
    verbose: { type: 'boolean', default: false },
  },
});
const N_CLIENTS = Number(opt.clients);
const DURATION_S = Number(opt.duration);
// The warm-up runs the same workload before the memory baseline is taken (why: see main).
const WARMUP_S = Number(opt.warmup ?? Math.min(60, Math.max(15, DURATION_S / 5)));
const N_SLOTS = Number(opt.slots);
const SEED = Number(opt.seed);
const CACHE_MIB = Number(opt['cache-ram']);
for (const [k, v] of Object.entries({ N_CLIENTS, DURATION_S, WARMUP_S, N_SLOTS, SEED, CACHE_MIB }))
  if (!Number.isInteger(v) || v < 0) throw new Error(`bad ${k}: ${v}`);

// server.mjs reads RECUR_BUILD / RECUR_TESTDATA when it is loaded; run.sh sets them.
const { startServer, waitSlotsIdle } = await import('../e2e/server.mjs');

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// mulberry32: a small seeded PRNG (uniform in [0, 1)); one stream per client.
function prng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const pick = (rnd, a) => a[Math.floor(rnd() * a.length)];

// ---- workload ------------------------------------------------------------------------------
// A few prompts, short and long, shared by the clients so that the prompt cache both hits
// (same prefix, a restore) and misses (evictions within --cache-ram).
const WORDS = 'the sea a ship sails under grey clouds while gulls cry over the harbour and the old captain ' +
  'counts the waves that break on the stones of the pier before the storm';
const long = (n) => {
  const w = WORDS.split(' ');
  return Array.from({ length: n }, (_, i) => w[(i * i + 3 * i) % w.length]).join(' ');
};
const PROMPTS = [
  'Once upon a time', 'Write a poem about the sea.', 'List three colours.', long(60), long(200),
  'Explain why the sky is blue in one sentence.', long(120), 'Count from one to ten:',
];
const SYSTEM = 'You are a helpful assistant that answers briefly.';
const SEEDS = [11, 22, 33, 44];
const LENGTHS = [8, 16, 32, 64];

// One request's plan, all drawn from the client's PRNG.
function plan(rnd, disconnecting) {
  const p = {
    chat: rnd() < 0.5,
    prompt: pick(rnd, PROMPTS),
    multiTurn: rnd() < 0.3,
    seed: pick(rnd, SEEDS),
    n: pick(rnd, LENGTHS),
    abortAt: null,          // null: read to the end; else see oneRequest
    abortDelayMs: 0,
  };
  if (disconnecting) {
    const r = rnd();
    if (r < 0.2) { p.abortAt = -1; p.abortDelayMs = Math.floor(rnd() * 30); }
    else p.abortAt = Math.floor(rnd() * p.n);
  }
  return p;
}

function chatBody(p) {
  const messages = [{ role: 'system', content: SYSTEM }];
  if (p.multiTurn) messages.push({ role: 'user', content: 'Hello.' }, { role: 'assistant', content: 'Hello! How can I help?' });
  messages.push({ role: 'user', content: p.prompt });
  return { model: 'recur', messages, max_tokens: p.n, seed: p.seed, temperature: 0.8, stream: true,
           chat_template_kwargs: { enable_thinking: false } };
}

// Reads an SSE body, calling onData(json) per `data:` line, until `[DONE]`, its end, or signal.
async function readSse(body, signal, onData) {
  const dec = new TextDecoder();
  let buf = '';
  for await (const chunk of body) {
    if (signal.aborted) return;
    buf += dec.decode(chunk, { stream: true });
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i).trim();
      buf = buf.slice(i + 1);
      if (!line.startsWith('data: ')) continue;
      const data = line.slice(6);
      if (data === '[DONE]') return;
      onData(JSON.parse(data));
      if (signal.aborted) return;
    }
  }
}

class Stats {
  constructor() {
    Object.assign(this, { sent: 0, completed: 0, disconnects: 0, errors: 0, busy: 0, ttft: [], total: [],
                          errorSamples: [], doneAt: [] });
    this.outputs = new Map();     // request key -> text of a completed request
    this.mismatches = [];
  }
  error(msg) {
    this.errors++;
    if (this.errorSamples.length < 10) this.errorSamples.push(msg);
  }
}

// One streamed request; returns when it completed, was aborted by us, or failed.
async function oneRequest(srv, client, p, st) {
  const ac = new AbortController();
  const t0 = performance.now();
  let pieces = 0, text = '', tFirst = null, finished = false;
  const piece = (s) => {
    if (!s) return;
    if (tFirst === null) tFirst = performance.now() - t0;
    text += s;
    pieces++;
    if (p.abortAt !== null && pieces >= p.abortAt) ac.abort();
  };
  // abortAt -1: gone after a few ms, maybe before the reply started; 0: once the reply's headers
  // came, before the first token; k: after k pieces of text
  if (p.abortAt === -1) setTimeout(() => ac.abort(), p.abortDelayMs);
  const headers = () => { if (p.abortAt === 0) ac.abort(); };
  st.sent++;
  try {
    if (p.chat) {
      const stream = await client.chat.completions.create(chatBody(p), { signal: ac.signal });
      headers();
      for await (const c of stream) {
        const ch = c.choices[0];
        piece(ch?.delta?.content ?? ch?.delta?.reasoning_content ?? '');
        if (ch?.finish_reason) finished = ch.finish_reason === 'length' || ch.finish_reason === 'stop';
        // leave the loop ourselves: the openai client's iterator, aborted from inside its own
        // loop body, never settles (the connection is closed, the loop just waits)
        if (ac.signal.aborted) break;
      }
    } else {
      const r = await fetch(`${srv.url}/completion`, {
        method: 'POST', headers: { 'Content-Type': 'application/json' }, signal: ac.signal,
        body: JSON.stringify({ prompt: p.prompt, n_predict: p.n, seed: p.seed, temperature: 0.8, stream: true }),
      });
      if (r.status !== 200) {
        const body = await r.text();
        if (r.status === 503) { st.busy++; return; }
        st.error(`/completion HTTP ${r.status}: ${body.slice(0, 200)}`);
        return;
      }
      headers();
      await readSse(r.body, ac.signal, (j) => {
        piece(j.content);
        if (j.stop) finished = j.stop_type === 'limit' || j.stop_type === 'eos' || j.stop_type === 'word';
      });
    }
  } catch (e) {
    if (ac.signal.aborted) { st.disconnects++; return; }
    if (e?.status === 503) { st.busy++; return; }
    st.error(`${p.chat ? 'chat' : '/completion'}: ${e?.status ?? ''} ${e?.message ?? e}`);
    return;
  }
  if (ac.signal.aborted) { st.disconnects++; return; }
  if (!finished) { st.error(`${p.chat ? 'chat' : '/completion'}: the stream ended without a finish reason`); return; }
  st.completed++;
  st.doneAt.push(Date.now());
  if (tFirst !== null) st.ttft.push(tFirst);
  st.total.push(performance.now() - t0);
  // The same request decoded in another batch, restored from another checkpoint, must give the
  // same text (design principle 3).
  const key = JSON.stringify([p.chat, p.prompt, p.multiTurn, p.seed, p.n]);
  const prev = st.outputs.get(key);
  if (prev === undefined) st.outputs.set(key, text);
  else if (prev !== text && st.mismatches.length < 5) st.mismatches.push({ key, prev, text });
}

async function runClients(srv, { seconds, seedBase, st }) {
  const until = Date.now() + seconds * 1000;
  const client = srv.client();
  await Promise.all(Array.from({ length: N_CLIENTS }, async (_, i) => {
    const rnd = prng(seedBase * 7919 + i);
    const disconnecting = i % 3 === 0;
    while (Date.now() < until) await oneRequest(srv, client, plan(rnd, disconnecting), st);
  }));
}

// Polls /health until stop() is called; counts failures.
function healthWatch(url) {
  const h = { ok: 0, fail: 0, samples: [], stopped: false };
  h.done = (async () => {
    while (!h.stopped) {
      try {
        const r = await fetch(`${url}/health`, { signal: AbortSignal.timeout(30000) });
        if (r.status === 200) h.ok++;
        else { h.fail++; h.samples.push(`HTTP ${r.status}`); }
      } catch (e) { h.fail++; h.samples.push(String(e?.message ?? e)); }
      await sleep(250);
    }
  })();
  h.stop = async () => { h.stopped = true; await h.done; };
  return h;
}

function rssKiB(pid) {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m[1]);
}

async function metrics(url) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const get = (name) => Number((new RegExp(`^\\S*${name} (\\S+)$`, 'm').exec(text) ?? [])[1]);
  return { processing: get('requests_processing'), deferred: get('requests_deferred'),
           cacheBytes: get('cache_bytes'), ckptEvicted: get('checkpoints_evicted_total') };
}

// Greedy references: one /completion and one chat request at temperature 0.
async function greedy(srv, cachePrompt) {
  const c = await (await fetch(`${srv.url}/completion`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt: PROMPTS[3], n_predict: 48, temperature: 0, cache_prompt: cachePrompt }),
  })).json();
  const r = await srv.client().chat.completions.create({
    ...chatBody({ prompt: PROMPTS[1], multiTurn: true, n: 48, seed: 1 }), stream: false, temperature: 0,
    cache_prompt: cachePrompt,
  });
  return { completion: c.content, chat: r.choices[0].message.content ?? r.choices[0].message.reasoning_content };
}

const pct = (a, q) => {
  if (!a.length) return NaN;
  const s = [...a].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))];
};
const ms = (x) => `${x.toFixed(0)} ms`;

async function main() {
  const failures = [];
  const check = (ok, msg) => { if (!ok) failures.push(msg); };
  console.log(`load: ${N_CLIENTS} clients (${Math.ceil(N_CLIENTS / 3)} disconnecting), ${DURATION_S} s after a ` +
              `${WARMUP_S} s warm-up, ${N_SLOTS} slots, --cache-ram ${CACHE_MIB} MiB, seed ${SEED}`);
  // -c 1024: the longest prompt + reply fits; a small --cache-ram so that the warm-up fills the
  // prompt cache to its budget (with the default 8 GiB it would keep growing for hours).
  const srv = await startServer('qwen35', ['-c', '1024', '-np', String(N_SLOTS), '--metrics',
                                           '--cache-ram', String(CACHE_MIB)], { logTail: 1 << 20 });
  let exitCode = null;
  try {
    const ref = await greedy(srv, false);
    check(ref.completion.length > 0 && ref.chat.length > 0, 'the greedy reference is empty');
    const rssStart = rssKiB(srv.pid);

    // Warm-up: the same workload. Resident memory right after start is not a fair baseline:
    // the model's mmap'd pages, the slots' KV and state buffers, the prompt cache (up to
    // --cache-ram), one thread stack and malloc arena per connection thread, and libc's free
    // lists are all touched on first use. After a warm-up that ran the same mix they are at
    // their working size, so any growth after it is a leak.
    const warm = new Stats();
    await runClients(srv, { seconds: WARMUP_S, seedBase: SEED + 1000, st: warm });
    check(await waitSlotsIdle(srv.url, 60000), 'a slot stayed busy after the warm-up');
    const rssWarm = rssKiB(srv.pid);
    const mWarm = await metrics(srv.url);

    const health = healthWatch(srv.url);
    const st = new Stats();
    const t0 = Date.now();
    let rssPeak = rssWarm;
    const peak = setInterval(() => { try { rssPeak = Math.max(rssPeak, rssKiB(srv.pid)); } catch { /* gone */ } }, 1000);
    await runClients(srv, { seconds: DURATION_S, seedBase: SEED, st });
    const t1 = Date.now();
    clearInterval(peak);
    await health.stop();

    const idle = await waitSlotsIdle(srv.url, 60000);
    check(idle, 'a slot stayed busy after the run');
    const slots = await (await fetch(`${srv.url}/slots`)).json();
    check(slots.length === N_SLOTS && slots.every((s) => !s.is_processing && s.id_task === -1),
          `slots not all idle: ${JSON.stringify(slots.map((s) => [s.id, s.is_processing, s.id_task]))}`);
    const mEnd = await metrics(srv.url);
    check(mEnd.processing === 0 && mEnd.deferred === 0, `requests left: ${JSON.stringify(mEnd)}`);
    const rssEnd = rssKiB(srv.pid);

    const after = await greedy(srv, true);
    const afterNoCache = await greedy(srv, false);
    check(after.completion === ref.completion && afterNoCache.completion === ref.completion,
          `greedy /completion changed:\n  start: ${JSON.stringify(ref.completion)}\n  end:   ${JSON.stringify(after.completion)}` +
          `\n  end, no cache: ${JSON.stringify(afterNoCache.completion)}`);
    check(after.chat === ref.chat && afterNoCache.chat === ref.chat,
          `greedy chat changed:\n  start: ${JSON.stringify(ref.chat)}\n  end:   ${JSON.stringify(after.chat)}` +
          `\n  end, no cache: ${JSON.stringify(afterNoCache.chat)}`);

    check(health.fail === 0, `/health failed ${health.fail} times: ${health.samples.slice(0, 5).join('; ')}`);
    check(st.errors === 0, `${st.errors} requests failed: ${st.errorSamples.join('\n  ')}`);
    check(st.completed > 0, 'no request completed');
    // progress all along: some request completed in each part of the run (tenths, or parts of at
    // least 10 s in a short run: a stall, not a slow machine, is what this is about)
    const parts = Math.max(1, Math.min(10, Math.floor(DURATION_S / 10)));
    const done = new Set(st.doneAt.map((t) => Math.min(parts - 1, Math.floor((t - t0) / ((t1 - t0) / parts)))));
    check(done.size === parts, `no request completed in parts ${[...Array(parts).keys()].filter((k) => !done.has(k))} ` +
          `of ${parts}`);
    check(st.mismatches.length === 0, `the same request gave different texts: ${JSON.stringify(st.mismatches[0])}`);
    const growth = (rssEnd - rssWarm) / rssWarm;
    check(Math.abs(growth) <= 0.05, `RSS after the run ${rssEnd} KiB is not within 5 % of ${rssWarm} KiB after the warm-up`);

    const repeats = st.completed - st.outputs.size;
    console.log([
      `requests sent ${st.sent} (warm-up ${warm.sent}), completed ${st.completed}, disconnects ${st.disconnects}, ` +
        `errors ${st.errors}, refused busy (503) ${st.busy}`,
      `same request completed again with the same text: ${repeats - st.mismatches.length} of ${repeats}`,
      `/health: ${health.ok} answered, ${health.fail} failed`,
      `RSS: start ${rssStart} KiB, after warm-up ${rssWarm} KiB, peak ${rssPeak} KiB, after the run ${rssEnd} KiB ` +
        `(${(growth * 100).toFixed(2)} %)`,
      `prompt cache: ${mWarm.cacheBytes} bytes after warm-up, ${mEnd.cacheBytes} after the run ` +
        `(budget ${CACHE_MIB} MiB; ${mEnd.ckptEvicted} checkpoints evicted)`,
      `latency: time to first token p50 ${ms(pct(st.ttft, 0.5))} p95 ${ms(pct(st.ttft, 0.95))}; ` +
        `total p50 ${ms(pct(st.total, 0.5))} p95 ${ms(pct(st.total, 0.95))} (completed requests; includes queueing)`,
      `throughput: ${(st.completed / ((t1 - t0) / 1000)).toFixed(1)} completed requests/s over ${((t1 - t0) / 1000).toFixed(0)} s`,
      `greedy text at start and end: ${after.completion === ref.completion && after.chat === ref.chat ? 'identical' : 'DIFFERENT'}`,
    ].map((l) => `load: ${l}`).join('\n'));
    if (opt.verbose || failures.length) console.log(srv.log.split('\n').slice(-40).join('\n'));
  } finally {
    exitCode = await srv.stop();
  }
  check(exitCode === 0, `recur-server exited with ${exitCode} on SIGTERM`);
  if (failures.length) {
    console.error(`load: FAILED\n  ${failures.join('\n  ')}`);
    process.exit(1);
  }
  console.log('load: OK');
}

await main();
