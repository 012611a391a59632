// lib.mjs — what the client suite's parts share: named checks, timeouts, a free port, a tiny
// static file server (node:http, no dependency) and kogpt2d's life cycle.
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { spawn } from 'node:child_process';

export const SKIP = 77;

// Every check has a name and passes unless its body throws; a failure prints its message and
// is kept, so one run reports every broken thing at once.
export class Checks {
  constructor() {
    this.failed = [];
    this.passed = 0;
  }

  async check(name, body) {
    try {
      await body();
      this.passed++;
      console.log(`ok - ${name}`);
      return true;
    } catch (e) {
      const why = (e instanceof Error ? `${e.constructor.name}: ${e.message}` : String(e)).trim();
      this.failed.push({ name, why });
      console.log(`FAIL - ${name}\n       ${why.replace(/\n/g, '\n       ')}`);
      return false;
    }
  }

  skip(name, why) {
    console.log(`skip - ${name} (${why})`);
  }
}

// Throws with msg (and the value it saw, when given) unless cond holds.
export function expect(cond, msg, seen) {
  if (!cond) throw new Error(seen === undefined ? msg : `${msg}; got ${short(seen)}`);
}

export function short(v, n = 300) {
  const s = typeof v === 'string' ? JSON.stringify(v) : JSON.stringify(v, (k, x) => (typeof x === 'bigint' ? String(x) : x));
  return s === undefined ? String(v) : s.length > n ? s.slice(0, n) + '…' : s;
}

// The promise, or a rejection after ms.
export function withTimeout(promise, ms, what) {
  let timer;
  const limit = new Promise((_, bad) => {
    timer = setTimeout(() => bad(new Error(`${what}: no end after ${ms / 1000} s`)), ms);
  });
  return Promise.race([promise, limit]).finally(() => clearTimeout(timer));
}

export const freePort = () => new Promise((ok, bad) => {
  const s = net.createServer();
  s.on('error', bad);
  s.listen(0, '127.0.0.1', () => {
    const p = s.address().port;
    s.close(() => ok(p));
  });
});

const TYPES = { '.html': 'text/html; charset=utf-8', '.mjs': 'text/javascript', '.js': 'text/javascript',
  '.json': 'application/json', '.map': 'application/json' };

// A static server on 127.0.0.1: routes maps a URL prefix to a folder, '/' answers page. Only
// regular files inside a mapped folder are served. Resolves {port, close}.
export function startStatic(routes, page) {
  const server = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://x');
    if (url.pathname === '/') {
      res.writeHead(200, { 'Content-Type': TYPES['.html'] });
      return res.end(page);
    }
    for (const [prefix, dir] of Object.entries(routes)) {
      if (!url.pathname.startsWith(prefix)) continue;
      const file = path.resolve(dir, '.' + decodeURIComponent(url.pathname.slice(prefix.length - 1)));
      if (!file.startsWith(path.resolve(dir) + path.sep)) break;
      let st;
      try { st = fs.statSync(file); } catch { break; }
      if (!st.isFile()) break;
      res.writeHead(200, { 'Content-Type': TYPES[path.extname(file)] || 'application/octet-stream' });
      return fs.createReadStream(file).pipe(res);
    }
    res.writeHead(404, { 'Content-Type': 'text/plain' });
    res.end('not found\n');
  });
  return new Promise((ok, bad) => {
    server.on('error', bad);
    server.listen(0, '127.0.0.1', () => ok({
      port: server.address().port,
      close: () => new Promise((done) => { server.closeAllConnections(); server.close(() => done()); }),
    }));
  });
}

// kogpt2d on 127.0.0.1:port with args; its output goes to logPath. Resolves once /readyz
// answers 200; rejects when it exits first or is not ready within ms.
export async function startDaemon(bin, args, port, logPath, ms = 60000) {
  const log = fs.openSync(logPath, 'w');
  const proc = spawn(bin, args, { stdio: ['ignore', log, log] });
  fs.closeSync(log);
  const d = {
    proc, port, logPath, exitCode: null, signal: null,
    url: `http://127.0.0.1:${port}`,
    exited: new Promise((ok) => proc.on('exit', (code, sig) => { d.exitCode = code; d.signal = sig; ok(); })),
    running: () => d.exitCode === null && d.signal === null,
    logTail: (n = 30) => {
      try { return fs.readFileSync(logPath, 'utf8').split('\n').slice(-n - 1).join('\n'); } catch { return ''; }
    },
  };
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (!d.running()) throw new Error(`kogpt2d exited (${d.exitCode ?? d.signal}) before it was ready:\n${d.logTail()}`);
    try {
      const r = await fetch(`${d.url}/readyz`, { signal: AbortSignal.timeout(2000) });
      if (r.status === 200) return d;
    } catch { /* not listening yet */ }
    await new Promise((ok) => setTimeout(ok, 100));
  }
  proc.kill('SIGKILL');
  throw new Error(`kogpt2d was not ready within ${ms / 1000} s:\n${d.logTail()}`);
}

// SIGTERM, then SIGKILL after ms: resolves {code, signal, killed}.
export async function stopDaemon(d, ms = 15000) {
  if (d.running()) d.proc.kill('SIGTERM');
  let killed = false;
  await withTimeout(d.exited, ms, 'kogpt2d after SIGTERM').catch(() => {
    killed = true;
    d.proc.kill('SIGKILL');
  });
  await d.exited;
  return { code: d.exitCode, signal: d.signal, killed };
}
