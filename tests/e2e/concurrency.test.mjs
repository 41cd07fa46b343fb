// concurrency.test.mjs — parallel slots on a hybrid model: concurrent greedy requests return
// exactly what the same request returns alone, and a client that disconnects mid-stream frees
// its slot.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, waitSlotsIdle } from './server.mjs';

describe('slots on qwen35', () => {
  let srv, client;
  before(async () => {
    srv = await startServer('qwen35', ['-c', '4096', '-np', '4']);
    client = srv.client();
  });
  after(async () => { assert.equal(await srv.stop(), 0, srv.log); });

  const req = {
    model: 'recur', temperature: 0, max_tokens: 32, ignore_eos: true,
    messages: [{ role: 'user', content: 'Write a poem about the sea.' }],
    chat_template_kwargs: { enable_thinking: false },
  };

  it('8 concurrent greedy requests on 4 slots equal the request served alone', async () => {
    const alone = (await client.chat.completions.create({ ...req, cache_prompt: false })).choices[0].message.content;
    assert.ok(alone.length > 0);
    const all = await Promise.all(Array.from({ length: 8 }, (_, i) =>
      client.chat.completions.create(i % 2 ? req : { ...req, stream: false })));
    for (const r of all) assert.equal(r.choices[0].message.content, alone);
    // streamed requests joining while others run
    const streams = await Promise.all(Array.from({ length: 4 }, async () => {
      let t = '';
      for await (const c of await client.chat.completions.create({ ...req, stream: true })) t += c.choices[0]?.delta?.content ?? '';
      return t;
    }));
    for (const t of streams) assert.equal(t, alone);
  });

  it('frees the slot of a client that disconnects mid-stream', async () => {
    const ac = new AbortController();
    // far more tokens than the synth model decodes before the server can see the abort (200
    // were all decoded within ~90 ms once on a quiet machine), so stopping early shows
    const stream = await client.chat.completions.create({ ...req, max_tokens: 3000, stream: true }, { signal: ac.signal });
    let n = 0;
    try {
      for await (const c of stream) {
        if (c.choices[0]?.delta?.content && ++n === 2) { ac.abort(); break; }
      }
    } catch { /* the client's own abort error */ }
    assert.equal(n, 2);
    assert.ok(await waitSlotsIdle(srv.url), 'a slot stayed busy after the client left');
    // the slot stopped early: it did not generate the 3000 tokens asked for
    const slots = await (await fetch(`${srv.url}/slots`)).json();
    const decoded = Math.max(...slots.map((s) => s.next_token[0].n_decoded));
    assert.ok(decoded < 3000, `n_decoded ${decoded}`);
    const r = await client.chat.completions.create(req);
    assert.equal(r.choices[0].finish_reason, 'length');
  });
});
