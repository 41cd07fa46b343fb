// chat.test.mjs — chat and text completions through the official OpenAI client, streamed and
// not, on a hybrid (qwen35) and an attention (llama) model: shapes, stream == non-stream,
// usage and cached tokens, stop strings, logprobs.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, postJson } from './server.mjs';

const messages = [
  { role: 'system', content: 'You are a helpful assistant.' },
  { role: 'user', content: 'Tell me a story about a cat and a boat.' },
];

async function collectChat(stream) {
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  return chunks;
}

for (const model of ['qwen35', 'llama']) {
  describe(`chat on ${model}`, () => {
    let srv, client;
    before(async () => {
      srv = await startServer(model, ['-c', '512', '-np', '2']);
      client = srv.client();
    });
    after(async () => { assert.equal(await srv.stop(), 0, srv.log); });

    // Qwen3.5's template opens a <think> block by default: everything would be reasoning_content
    const greedy = { model: 'recur', messages, max_tokens: 24, temperature: 0, ignore_eos: true,
                     chat_template_kwargs: { enable_thinking: false } };

    it('answers a non-streamed chat with llama-server fields', async () => {
      const r = await client.chat.completions.create(greedy);
      assert.match(r.id, /^chatcmpl/);
      assert.equal(r.object, 'chat.completion');
      assert.match(r.system_fingerprint, /^b/);
      assert.equal(r.choices.length, 1);
      const ch = r.choices[0];
      assert.equal(ch.message.role, 'assistant');
      assert.equal(typeof ch.message.content, 'string');
      assert.ok(ch.message.content.length > 0);
      assert.equal(ch.finish_reason, 'length');
      assert.equal(r.usage.completion_tokens, 24);
      assert.ok(r.usage.prompt_tokens > 10);
      assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
      assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');
      assert.equal(typeof r.timings.prompt_n, 'number');
    });

    it('streams the same text it returns unstreamed', async () => {
      const whole = await client.chat.completions.create(greedy);
      const chunks = await collectChat(await client.chat.completions.create(
        { ...greedy, stream: true, stream_options: { include_usage: true } }));
      assert.equal(chunks[0].choices[0].delta.role, 'assistant');
      const text = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
      assert.equal(text, whole.choices[0].message.content);
      const fin = chunks.filter((c) => c.choices[0]?.finish_reason);
      assert.equal(fin.length, 1);
      assert.equal(fin[0].choices[0].finish_reason, 'length');
      const usage = chunks[chunks.length - 1];
      assert.deepEqual(usage.choices, []);
      assert.equal(usage.usage.completion_tokens, 24);
      for (const c of chunks) assert.match(c.id, /^chatcmpl/);
    });

    it('reports cached tokens when the same prompt comes again', async () => {
      await client.chat.completions.create(greedy);
      const again = await client.chat.completions.create(greedy);
      const cached = again.usage.prompt_tokens_details.cached_tokens;
      // an identical resend evaluates nothing: the prompt cache kept the last token's logits
      assert.equal(cached, again.usage.prompt_tokens, `cached_tokens ${cached}`);
      assert.equal(again.timings.prompt_n, 0);
      assert.equal(again.timings.cache_n + again.timings.prompt_n, again.usage.prompt_tokens);
    });

    it('stops at a stop string and never shows it, streamed or not', async () => {
      const full = (await client.chat.completions.create(greedy)).choices[0].message.content;
      // a stop string from the middle of the greedy text: the answer must end right before it
      let stop = null;
      for (let k = Math.floor(full.length / 2); k > 0 && !stop; k--) {
        const s = full.slice(k, k + 2);
        if (s.trim().length === 2 && full.indexOf(s) > 0) stop = s;
      }
      assert.ok(stop, `no usable stop string in ${JSON.stringify(full)}`);
      const expect = full.slice(0, full.indexOf(stop));
      const r = await client.chat.completions.create({ ...greedy, stop: [stop, 'never-seen-xyz'] });
      assert.equal(r.choices[0].message.content, expect);
      assert.equal(r.choices[0].finish_reason, 'stop');
      const chunks = await collectChat(await client.chat.completions.create({ ...greedy, stop, stream: true }));
      const text = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
      assert.equal(text, expect);
    });

    it('returns logprobs with top_logprobs', async () => {
      const r = await client.chat.completions.create({ ...greedy, max_tokens: 5, logprobs: true, top_logprobs: 3 });
      const lp = r.choices[0].logprobs.content;
      assert.equal(lp.length, 5);
      for (const t of lp) {
        assert.equal(typeof t.token, 'string');
        assert.ok(t.logprob <= 0);
        assert.equal(t.top_logprobs.length, 3);
        // greedy: the chosen token is the most likely one
        assert.equal(t.logprob, t.top_logprobs[0].logprob);
      }
    });

    if (model === 'qwen35') {
      it('splits reasoning_content out of the answer (thinking on)', async () => {
        const req = { ...greedy, chat_template_kwargs: undefined, max_tokens: 12 };
        const r = await client.chat.completions.create(req);
        assert.equal(typeof r.choices[0].message.reasoning_content, 'string');
        assert.ok(r.choices[0].message.reasoning_content.length > 0);
        let reasoning = '';
        for await (const c of await client.chat.completions.create({ ...req, stream: true }))
          reasoning += c.choices[0]?.delta?.reasoning_content ?? '';
        assert.equal(reasoning, r.choices[0].message.reasoning_content);
      });
    }

    it('serves OpenAI text completions, streamed and not', async () => {
      const req = { model: 'recur', prompt: 'Once upon a time', max_tokens: 16, temperature: 0, ignore_eos: true };
      const r = await client.completions.create(req);
      assert.match(r.id, /cmpl/);
      assert.equal(r.object, 'text_completion');
      assert.equal(r.choices[0].finish_reason, 'length');
      assert.equal(r.usage.completion_tokens, 16);
      let text = '';
      for await (const c of await client.completions.create({ ...req, stream: true })) text += c.choices[0]?.text ?? '';
      assert.equal(text, r.choices[0].text);
    });

    it('resumes a longer token prompt from what the slot holds (native /completion)', async () => {
      const tok = await postJson(`${srv.url}/tokenize`, { content: 'The cat sat on the mat and looked at the boat.' });
      assert.equal(tok.status, 200);
      const a = tok.json.tokens;
      const base = { n_predict: 4, temperature: 0, cache_prompt: true, id_slot: 1, return_tokens: true };
      const r1 = await postJson(`${srv.url}/completion`, { ...base, prompt: a });
      assert.equal(r1.status, 200, r1.text);
      const longer = [...a, ...r1.json.tokens, ...a];
      const r2 = await postJson(`${srv.url}/completion`, { ...base, prompt: longer });
      assert.equal(r2.status, 200, r2.text);
      const t = r2.json.timings;
      assert.ok(t.cache_n > 0, `cache_n ${t.cache_n}`);
      assert.equal(t.cache_n + t.prompt_n, longer.length);
      // the same prompt served cold gives the same tokens
      const r3 = await postJson(`${srv.url}/completion`, { ...base, prompt: longer, cache_prompt: false, id_slot: 0 });
      assert.equal(r3.json.timings.cache_n, 0);
      assert.deepEqual(r3.json.tokens, r2.json.tokens);
      assert.equal(r3.json.content, r2.json.content);
    });
  });
}
