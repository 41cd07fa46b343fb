// server.mjs — starts and stops a recur-server for the e2e tests, and small HTTP helpers.
//
// Environment (set by run.sh): RECUR_BUILD (the build folder with recur-server) and
// RECUR_TESTDATA (../shared/testdata). Every server binds 127.0.0.1 on a free port.
import { spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { once } from 'node:events';
import path from 'node:path';
import OpenAI from 'openai';

const BUILD = process.env.RECUR_BUILD ?? 'build';
const TESTDATA = process.env.RECUR_TESTDATA ?? '../shared/testdata';

export const models = {
  qwen35: {
    file: path.join(TESTDATA, 'models/pub-qwen35-Q8_0.gguf'),
    template: path.join(TESTDATA, 'templates/jinja/Qwen3.5-27B.jinja'),
  },
  llama: {
    file: path.join(TESTDATA, 'models/pub-llama-F32.gguf'),
    template: path.join(TESTDATA, 'templates/jinja/meta-llama-Llama-3.2-3B-Instruct.jinja'),
  },
  qwen3next: {
    file: path.join(TESTDATA, 'models/pub-qwen3next-Q8_0.gguf'),
    template: path.join(TESTDATA, 'templates/jinja/Qwen-Qwen2.5-7B-Instruct.jinja'),
  },
  mamba2: {
    file: path.join(TESTDATA, 'models/pub-mamba2-F32.gguf'),
    template: path.join(TESTDATA, 'templates/jinja/Qwen-Qwen2.5-7B-Instruct.jinja'),
  },
  lfm2: {
    file: path.join(TESTDATA, 'models/pub-lfm2-Q8_0.gguf'),
    template: path.join(TESTDATA, 'templates/jinja/LFM2-8B-A1B.jinja'),
  },
  qwen3: {
    file: path.join(TESTDATA, 'models/pub-qwen3-Q8_0.gguf'),
    template: path.join(TESTDATA, 'templates/jinja/Qwen-Qwen3-0.6B.jinja'),
  },
};

async function freePort() {
  const srv = createServer();
  srv.listen(0, '127.0.0.1');
  await once(srv, 'listening');
  const { port } = srv.address();
  srv.close();
  await once(srv, 'close');
  return port;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Starts recur-server on `model` (a key of `models`) with extra flags; resolves once /health
// answers 200. The returned object has url, port, client(apiKey), stop() and the log so far
// (its last logTail characters when given: a long load test would otherwise hold all of it).
export async function startServer(model, extra = [], { apiKey, logTail } = {}) {
  const m = models[model];
  const port = await freePort();
  const args = ['-m', m.file, '--chat-template-file', m.template, '--host', '127.0.0.1',
                '--port', String(port), '-t', '2', ...extra];
  if (apiKey) args.push('--api-key', apiKey);
  const proc = spawn(path.join(BUILD, 'recur-server'), args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  const append = (d) => {
    log += d;
    if (logTail && log.length > 2 * logTail) log = log.slice(-logTail);
  };
  proc.stdout.on('data', append);
  proc.stderr.on('data', append);
  let exited = null;
  proc.on('exit', (code, sig) => { exited = { code, sig }; });
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 600; i++) {       // up to 60 s: the ASan build loads slowly
    if (exited) throw new Error(`recur-server exited (${JSON.stringify(exited)}):\n${log}`);
    try {
      const r = await fetch(`${url}/health`);
      if (r.status === 200) break;
    } catch { /* not listening yet */ }
    await sleep(100);
  }
  return {
    url,
    port,
    pid: proc.pid,
    get log() { return log; },
    client(key = apiKey ?? 'sk-no-key-required') {
      return new OpenAI({ baseURL: `${url}/v1`, apiKey: key, maxRetries: 0 });
    },
    // SIGKILL (a crash, a power cut): resolves once it is gone.
    async kill() {
      if (exited) return;
      proc.kill('SIGKILL');
      await once(proc, 'exit');
    },
    // SIGTERM, then the exit status (null when it had to be killed).
    async stop() {
      if (exited) return exited.code;
      proc.kill('SIGTERM');
      const t = setTimeout(() => proc.kill('SIGKILL'), 15000);
      await once(proc, 'exit');
      clearTimeout(t);
      return exited.sig ? null : exited.code;
    },
  };
}

export async function postJson(url, body, headers = {}) {
  const r = await fetch(url, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, json, text };
}

// Polls GET /slots until no slot is processing; false if that does not happen in `ms`.
export async function waitSlotsIdle(url, ms = 10000) {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    const slots = await (await fetch(`${url}/slots`)).json();
    if (slots.every((s) => !s.is_processing)) return true;
    await sleep(50);
  }
  return false;
}
