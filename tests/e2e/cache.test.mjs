// cache.test.mjs — the prompt cache on the chat workloads of a front end or an agent loop, on
// hybrid (qwen35, qwen3next, lfm2), recurrent (mamba2) and attention (llama, qwen3) models.
// For each request the test knows the minimum work: the prompt tokens after the longest prefix
// shared with anything the server evaluated before (a previous prompt + its generated tokens);
// an identical resend has minimum 0 (its last token's logits are cached). It asserts that a
// resend or regenerate evaluates nothing, that an appended turn evaluates at most 1 token beyond
// the minimum when the test sends the reply back as the server returned it (the server, when
// idle, re-renders each reply as the client will send it back and derives a checkpoint where
// that re-tokenizes differently from the generated tokens; else it resumes after the previous
// prompt), that replacing an earlier message evaluates at most one token beyond the minimum,
// that replacing the last one does too (its content start has a checkpoint), that
// another conversation on the same system prompt reuses it, and that the same workload with
// caching off gives bit-identical tokens and logprobs.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, postJson } from './server.mjs';

const words = ('the cat sat on a warm mat while boats drifted past the old harbour wall and gulls ' +
               'argued over bread near the quiet market square by the river').split(' ');
const text = (n, salt) => Array.from({ length: n }, (_, i) => words[(i * 7 + salt * 13) % words.length]).join(' ');
const sleep = (ms) => new Promise((res) => setTimeout(res, ms));

function lcp(a, b) {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}

// One server, and what it evaluated so far (for the minimum).
class Session {
  constructor(srv, cache) { this.srv = srv; this.cache = cache; this.seen = []; }

  async tokens(messages) {
    const t = await postJson(`${this.srv.url}/apply-template`, { messages });
    assert.equal(t.status, 200, t.text);
    const k = await postJson(`${this.srv.url}/tokenize`, { content: t.json.prompt, add_special: true });
    assert.equal(k.status, 200, k.text);
    return k.json.tokens;
  }

  // Waits until the server has dealt with every reply it returned (recur:reply_checks_total): when
  // idle it re-renders each one as the client will send it back and derives a checkpoint where
  // that differs from the generated tokens. A client that answers after that (a person typing, a
  // tool running) finds it. false when the server has no /metrics or its cache is off.
  async settle() {
    if (!this.cache) return false;
    for (let i = 0; i < 3000; i++) {   // a liveness bound (30 s), not a speed assertion
      const r = await fetch(`${this.srv.url}/metrics`);
      if (r.status !== 200) return false;
      const m = (await r.text()).match(/^recur:reply_checks_total (\S+)$/m);
      if (Number(m[1]) >= (this.srv.replies ?? 0)) return true;
      await sleep(10);
    }
    assert.fail(`the server did not check its ${this.srv.replies} replies\n${this.srv.log.slice(-3000)}`);
  }

  // Sends the chat; returns { reply, prompt_n, min, tokens, logprobs }.
  async chat(messages) {
    const settled = await this.settle();
    let prompt = await this.tokens(messages);
    const r = await postJson(`${this.srv.url}/v1/chat/completions`, {
      messages, max_tokens: 8, temperature: 0, ignore_eos: true, return_tokens: true, logprobs: true,
      top_logprobs: 2, cache_prompt: this.cache,
    });
    assert.equal(r.status, 200, r.text);
    const n = r.json.usage.prompt_tokens;
    if (prompt.length === n + 1 && prompt[0] === prompt[1]) prompt = prompt.slice(1);   // a doubled BOS
    assert.equal(prompt.length, n, 'the test tokenizes prompts as the server does');
    let best = 0;
    for (const s of this.seen) best = Math.max(best, lcp(prompt, s));
    const min = best >= n ? 0 : n - best;
    // an appended turn resumes where the previous reply, as sent back, diverges from the generated
    // tokens (a random model's bytes rarely survive the round trip through text: U+FFFD, other
    // merges), when the server had the time to check it and the test sent back the reply it got
    // (the templates here drop a past turn's reasoning_content, which the test does not send);
    // else after the previous prompt, where a checkpoint with logits is
    const prev = this.last;
    let append_bound = null;
    if (prev) {
      const l = lcp(prompt, [...prev.prompt, ...prev.gen]);
      // (a divergence inside the previous prompt, e.g. a re-rendered generation prompt, is at a
      // checkpoint: every token of a short generation prompt has one)
      const inside = l > prev.prompt.length && l < prev.prompt.length + prev.gen.length - 1;
      append_bound = inside && !(prev.unchanged && settled) ? n - prev.prompt.length : min + 1;
    }
    if (this.cache) this.srv.replies = (this.srv.replies ?? 0) + 1;
    this.seen.push([...prompt, ...r.json.tokens]);
    // a random model's reply may hold template control text ("</think>", "<|im_end|>") and NULs that
    // no real client round-trips: the conversation continues with them blanked
    const content = r.json.choices[0].message.content ?? '';
    const reply = content.replace(/[<>\u0000-\u0009\u000b-\u001f]/g, ' ');
    this.last = { prompt, gen: r.json.tokens, unchanged: reply === content };
    return { reply, prompt_n: r.json.timings.prompt_n, min, append_bound,
             cache_n: r.json.timings.cache_n, tokens: r.json.tokens, logprobs: r.json.choices[0].logprobs,
             cached: r.json.usage.prompt_tokens_details?.cached_tokens };
  }
}

// The workloads: each returns the per-request results and the kinds that must be near-minimal.
async function workloads(sess) {
  const out = [];
  const rec = (kind, r) => { out.push({ kind, ...r }); return r; };
  const sys = { role: 'system', content: text(150, 1) };
  let msgs = [sys, { role: 'user', content: text(20, 2) }];
  let r = rec('first', await sess.chat(msgs));
  for (let turn = 0; turn < 3; turn++) {   // appended turns
    msgs = [...msgs, { role: 'assistant', content: r.reply }, { role: 'user', content: text(15, 3 + turn) }];
    r = rec('append', await sess.chat(msgs));
  }
  rec('regenerate', await sess.chat(msgs));
  rec('identical', await sess.chat(msgs));
  const last = msgs.length - 1;
  msgs = msgs.map((m, i) => (i === last ? { role: 'user', content: 'Rather: ' + text(12, 9) } : m));
  rec('edit-last', await sess.chat(msgs));
  msgs = msgs.map((m, i) => (i === 1 ? { role: 'user', content: 'Instead ' + text(18, 11) } : m));
  rec('edit-earlier', await sess.chat(msgs));
  // another conversation on the same system prompt (an agent): the system prefix is reused
  rec('agent', await sess.chat([sys, { role: 'user', content: text(10, 21) }]));
  return out;
}


// RECUR_E2E_SANITIZER (the ASan run in .ci/run): one hybrid, one recurrent, one attention model,
// and no resident-memory bound (ASan keeps freed memory in quarantine)
const sanitizer = Boolean(process.env.RECUR_E2E_SANITIZER);
const cacheModels = sanitizer ? ['qwen35', 'mamba2', 'llama']
                                                : ['qwen35', 'qwen3next', 'mamba2', 'lfm2', 'llama', 'qwen3'];
for (const model of cacheModels) {
  describe(`prompt cache on ${model}`, () => {
    let on, off;
    before(async () => {
      const flags = ['-c', '2048', '-np', '2', '--metrics'];
      [on, off] = await Promise.all([startServer(model, flags), startServer(model, [...flags, '--cache-ram', '0'])]);
    });
    after(async () => {
      assert.equal(await on.stop(), 0, on.log);
      assert.equal(await off.stop(), 0, off.log);
    });

    it('evaluates at most one token beyond the minimum, and nothing for a resend', async () => {
      const sess = new Session(on, true);
      const res = await workloads(sess);
      await sess.settle();
      const ref = await workloads(new Session(off, false));
      for (const [i, r] of res.entries()) {
        const why = `${model} ${r.kind}: prompt_n ${r.prompt_n}, minimum ${r.min}\n${on.log.slice(-3000)}`;
        if (r.kind === 'append') assert.ok(r.prompt_n <= r.append_bound, `${why} (bound ${r.append_bound})`);
        if (r.kind === 'identical' || r.kind === 'regenerate') assert.equal(r.prompt_n, 0, why);
        if (r.kind === 'edit-last') assert.ok(r.cache_n > 0 && r.prompt_n <= r.min + 1, why);
        if (r.kind === 'edit-earlier') assert.ok(r.prompt_n <= r.min + 1, why);
        if (r.kind === 'agent') assert.ok(r.cache_n >= 150, why);   // the system prompt came from the cache
        assert.equal(r.cached, r.cache_n);
        assert.equal(ref[i].cache_n, 0);
        // caching never changes a result
        assert.deepEqual(r.tokens, ref[i].tokens, `${model} ${r.kind}: tokens differ with the cache off`);
        assert.deepEqual(r.logprobs, ref[i].logprobs, `${model} ${r.kind}: logprobs differ with the cache off`);
      }
      const m = await (await fetch(`${on.url}/metrics`)).text();
      const val = (k) => Number(m.match(new RegExp(`^recur:${k} (\\S+)$`, 'm'))[1]);
      assert.ok(val('checkpoints_created_total') > 0 || model === 'llama' || model === 'qwen3');
      assert.ok(val('cache_tokens_reused_total') > 0);
      assert.ok(val('cache_bytes') > 0);
      // every reply was checked once; a derived checkpoint cost at least one token
      assert.equal(val('reply_checks_total'), on.replies);
      assert.ok(val('reply_tokens_evaluated_total') >= val('reply_checkpoints_total'));
      const offm = await (await fetch(`${off.url}/metrics`)).text();
      assert.match(offm, /^recur:cache_bytes 0$/m);
    });
  });
}

describe('prompt cache budget', () => {
  it('stays within --cache-ram while many conversations are filed', async () => {
    const srv = await startServer('qwen35', ['-c', '1024', '-np', '1', '--metrics', '--cache-ram', '8']);
    const fs = await import('node:fs');
    const rss = () => Number(fs.readFileSync(`/proc/${srv.pid}/status`, 'utf8').match(/VmRSS:\s+(\d+) kB/)[1]) * 1024;
    try {
      const budget = 8 * 1024 * 1024;
      let rss0 = 0;
      for (let k = 0; k < 16; k++) {
        if (k === 1) rss0 = rss();   // after the first request: weights and buffers are resident
        const r = await postJson(`${srv.url}/completion`, { prompt: text(200, 40 + k), n_predict: 4, temperature: 0 });
        assert.equal(r.status, 200, r.text);
        const m = await (await fetch(`${srv.url}/metrics`)).text();
        const bytes = Number(m.match(/^recur:cache_bytes (\S+)$/m)[1]);
        assert.ok(bytes <= budget, `cache ${bytes} bytes > budget ${budget}`);
      }
      const m = await (await fetch(`${srv.url}/metrics`)).text();
      assert.ok(Number(m.match(/^recur:checkpoints_evicted_total (\S+)$/m)[1]) > 0, 'the budget was reached');
      // resident memory grew by at most the budget, plus 4 MiB for the allocator and the HTTP side
      // (an unbounded cache would have grown by ~35 MB here)
      const grown = rss() - rss0;
      if (!sanitizer) assert.ok(grown <= budget + 4 * 1024 * 1024, `RSS grew ${grown} bytes with a ${budget}-byte cache`);
      // the newest prompt is still restorable: a resend evaluates nothing
      const again = await postJson(`${srv.url}/completion`, { prompt: text(200, 55), n_predict: 4, temperature: 0 });
      assert.equal(again.json.timings.prompt_n, 0, srv.log.slice(-2000));
    } finally {
      assert.equal(await srv.stop(), 0, srv.log);
    }
  });
});

// Save, restart, restore, continue: the restored conversation and the --cache-dir copy of the
// prompt cache both let the next turn evaluate (almost) only its new tokens.
describe('prompt cache across a restart', () => {
  for (const model of cacheModels) {
    it(`resumes a conversation after a restart (${model})`, async () => {
      const fs = await import('node:fs');
      const os = await import('node:os');
      const dir = fs.mkdtempSync(`${os.tmpdir()}/recur-e2e-`);
      const flags = ['-c', '2048', '-np', '1', '--slot-save-path', dir, '--metrics'];
      let srv = await startServer(model, flags);
      let sess = new Session(srv, true);
      const sys = { role: 'system', content: text(120, 5) };
      let msgs = [sys, { role: 'user', content: text(20, 6) }];
      let r = await sess.chat(msgs);
      msgs = [...msgs, { role: 'assistant', content: r.reply }, { role: 'user', content: text(12, 7) }];
      r = await sess.chat(msgs);
      await sess.settle();   // the reply's checkpoint goes into the file too
      const save = await postJson(`${srv.url}/slots/0?action=save`, { filename: 'conv.bin' });
      assert.equal(save.status, 200, save.text);
      assert.equal(save.json.n_saved, sess.last.prompt.length + sess.last.gen.length - 1);
      const bad = await postJson(`${srv.url}/slots/0?action=save`, { filename: '../x.bin' });
      assert.equal(bad.status, 400);
      assert.equal(await srv.stop(), 0, srv.log);

      srv = await startServer(model, flags);
      const missing = await postJson(`${srv.url}/slots/0?action=restore`, { filename: 'nope.bin' });
      assert.equal(missing.status, 404, missing.text);
      const rest = await postJson(`${srv.url}/slots/0?action=restore`, { filename: 'conv.bin' });
      assert.equal(rest.status, 200, rest.text);
      assert.equal(rest.json.n_restored, save.json.n_saved);
      sess.srv = srv;
      msgs = [...msgs, { role: 'assistant', content: r.reply }, { role: 'user', content: text(10, 8) }];
      const next = await sess.chat(msgs);
      assert.ok(next.prompt_n <= next.append_bound, `after restore: prompt_n ${next.prompt_n}, bound ${next.append_bound}\n${srv.log}`);
      assert.equal(await srv.stop(), 0, srv.log);

      // --cache-dir: written at exit, loaded at start; an identical resend evaluates nothing
      const cflags = ['-c', '2048', '-np', '1', '--cache-dir', dir];
      srv = await startServer(model, cflags);
      sess = new Session(srv, true);
      await sess.chat(msgs);
      assert.equal(await srv.stop(), 0, srv.log);
      assert.ok(fs.existsSync(`${dir}/prompt-cache.bin`));
      srv = await startServer(model, cflags);
      sess = new Session(srv, true);
      const again = await sess.chat(msgs);
      assert.equal(again.prompt_n, 0, srv.log);
      assert.equal(await srv.stop(), 0, srv.log);
      fs.rmSync(dir, { recursive: true });
    });
  }
});

// A kill -9 while a slot is being saved over an earlier save loses nothing: the file is written
// to NAME.tmp and renamed, so a restart finds the old save or the new one, whole.
describe('a kill during a slot save', () => {
  it('leaves the earlier save whole', async () => {
    const fs = await import('node:fs');
    const os = await import('node:os');
    const dir = fs.mkdtempSync(`${os.tmpdir()}/recur-e2e-kill-`);
    const flags = ['-c', '2048', '-np', '1', '--slot-save-path', dir];
    let srv = await startServer('qwen35', flags);
    const sess = new Session(srv, true);
    let msgs = [{ role: 'system', content: text(120, 5) }, { role: 'user', content: text(20, 6) }];
    const r = await sess.chat(msgs);
    const first = await postJson(`${srv.url}/slots/0?action=save`, { filename: 'conv.bin' });
    assert.equal(first.status, 200, first.text);
    msgs = [...msgs, { role: 'assistant', content: r.reply }, { role: 'user', content: text(12, 7) }];
    await sess.chat(msgs);
    for (let k = 0; k < 3; k++) {   // kill at a few points of the second save
      const pending = postJson(`${srv.url}/slots/0?action=save`, { filename: 'conv.bin' }).catch(() => null);
      await new Promise((res) => setTimeout(res, 2 + 7 * k));
      await srv.kill();
      await pending;
      srv = await startServer('qwen35', flags);
      sess.srv = srv;
      const rest = await postJson(`${srv.url}/slots/0?action=restore`, { filename: 'conv.bin' });
      assert.equal(rest.status, 200, `restore after a kill: ${rest.text}\n${srv.log}`);
      assert.ok(rest.json.n_restored >= first.json.n_saved, rest.text);
      // put the longer conversation back in the slot for the next round's save
      await sess.chat(msgs);
    }
    assert.equal(await srv.stop(), 0, srv.log);
    fs.rmSync(dir, { recursive: true });
  });
});

// A kill -9 while --cache-dir's file is being rewritten (the write-behind after 2 s idle) loses
// nothing: the restart loads the earlier file or the new one, whole. The kill is sent as soon as
// the temporary file appears, so it lands inside the write.
describe('a kill during a cache write', () => {
  it('leaves the earlier cache file loadable', async () => {
    const fs = await import('node:fs');
    const os = await import('node:os');
    const dir = fs.mkdtempSync(`${os.tmpdir()}/recur-e2e-killcache-`);
    const flags = ['-c', '4096', '-np', '1', '--cache-dir', dir];
    const file = `${dir}/prompt-cache.bin`;
    const first = [{ role: 'system', content: text(300, 3) }, { role: 'user', content: text(40, 4) }];
    let srv = await startServer('qwen35', flags);
    await new Session(srv, true).chat(first);
    assert.equal(await srv.stop(), 0, srv.log);
    assert.ok(fs.existsSync(file), srv.log);
    let caught = 0;
    for (let k = 0; k < 3; k++) {
      srv = await startServer('qwen35', flags);
      assert.match(srv.log, /prompt cache loaded/, srv.log);
      // the earlier conversation comes whole from the file
      assert.equal((await new Session(srv, true).chat(first)).prompt_n, 0, srv.log);
      // something new to write, then wait for the write-behind and kill inside it
      await new Session(srv, true).chat([{ role: 'system', content: text(300, 10 + k) },
                                         { role: 'user', content: text(40, 20 + k) }]);
      const t0 = Date.now();
      while (!fs.existsSync(`${file}.tmp`) && Date.now() - t0 < 10000) await new Promise((res) => setImmediate(res));
      if (fs.existsSync(`${file}.tmp`)) caught++;
      await srv.kill();
      fs.rmSync(`${file}.tmp`, { force: true });   // (a stale one would be truncated anyway)
    }
    assert.ok(caught > 0, 'no kill landed inside a cache write');
    srv = await startServer('qwen35', flags);
    assert.match(srv.log, /prompt cache loaded/, srv.log);
    assert.equal((await new Session(srv, true).chat(first)).prompt_n, 0, srv.log);
    assert.equal(await srv.stop(), 0, srv.log);
    fs.rmSync(dir, { recursive: true });
  });
});
