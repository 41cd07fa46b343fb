// errors.test.mjs — llama-server's error replies: API key, bad JSON, wrongly typed fields,
// a prompt longer than the context, unknown routes. The server keeps serving after each.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, postJson } from './server.mjs';

describe('errors', () => {
  let srv, client;
  const key = 'sk-e2e-secret';
  const auth = { Authorization: `Bearer ${key}` };
  before(async () => {
    srv = await startServer('qwen35', ['-c', '128', '-np', '1'], { apiKey: key });
    client = srv.client();
  });
  after(async () => { assert.equal(await srv.stop(), 0, srv.log); });

  it('refuses a wrong API key with 401, keeps /health public', async () => {
    const bad = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'sk-wrong', maxRetries: 0 });
    await assert.rejects(bad.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'hi' }] }),
      (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
    const r = await fetch(`${srv.url}/v1/models`);
    assert.equal(r.status, 401);
    const body = await r.json();
    assert.equal(body.error.type, 'authentication_error');
    assert.equal((await fetch(`${srv.url}/health`)).status, 200);
    const x = await fetch(`${srv.url}/v1/models`, { headers: { 'X-Api-Key': key } });
    assert.equal(x.status, 200);
  });

  it('answers malformed JSON with 400 invalid_request_error', async () => {
    const r = await postJson(`${srv.url}/v1/chat/completions`, '{"messages": [', auth);
    assert.equal(r.status, 400);
    assert.equal(r.json.error.type, 'invalid_request_error');
    assert.equal(r.json.error.code, 400);
    assert.equal(typeof r.json.error.message, 'string');
  });

  it('answers wrongly typed fields with 400', async () => {
    const bads = [
      { messages: 'hello' },
      { messages: [{ role: 'user', content: 'hi' }], temperature: 'hot' },
      { messages: [{ role: 'user', content: 'hi' }], max_tokens: 'many' },
      { messages: [{ role: 'user', content: 'hi' }], stop: 42 },
    ];
    for (const b of bads) {
      const r = await postJson(`${srv.url}/v1/chat/completions`, b, auth);
      assert.equal(r.status, 400, JSON.stringify(b) + ' -> ' + r.text);
      assert.equal(r.json.error.type, 'invalid_request_error');
    }
    await assert.rejects(client.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'hi' }], top_k: 'x' }),
      (e) => e instanceof OpenAI.BadRequestError && e.status === 400);
  });

  it('refuses a prompt longer than the context with exceed_context_size_error', async () => {
    const long = 'the cat sat on the mat '.repeat(100);
    await assert.rejects(client.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: long }] }),
      (e) => e.status === 400 && e.error?.type === 'exceed_context_size_error');
    const r = await postJson(`${srv.url}/completion`, { prompt: long, n_predict: 4 }, auth);
    assert.equal(r.status, 400);
    assert.equal(r.json.error.type, 'exceed_context_size_error');
    assert.equal(r.json.error.n_ctx, 128);
    assert.ok(r.json.error.n_prompt_tokens > 128);
  });

  it('answers unknown routes with 404 and still serves', async () => {
    const r = await fetch(`${srv.url}/v1/nothing-here`, { headers: auth });
    assert.equal(r.status, 404);
    const ok = await client.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 });
    assert.equal(ok.object, 'chat.completion');
  });
});
